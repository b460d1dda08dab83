"""``python -m gpukit.mutex`` / ``gpumutex-run``: run a command with exclusive use of GPUs."""

import sys

from . import main as _main


def main() -> None:
    """Entry point of the ``gpumutex-run`` console script."""
    sys.exit(_main())


if __name__ == "__main__":
    main()
