"""``python -m gpukit.offload`` / ``gpukit-offload``: run, calibrate, explain."""

import sys

from . import main as _main


def main() -> None:
    """Entry point of the ``gpukit-offload`` console script."""
    sys.exit(_main())


if __name__ == "__main__":
    main()
