#!/usr/bin/env bash
# The GPU host's bundle with a complete wheel: `../shared/gpu/pack --wheel` runs maturin directly,
# which skips the package's build backend (gpukit-python/build/gpukit_build.py) and with it the
# two LD_PRELOAD libraries the wheel ships; build them first, as `pip install ./gpukit-python`
# does, then pack (prewarmed kernel cache, tests, examples, the wheel).
#   tools/gpu/bundle.sh [pack options]      (default: --prewarm --wheel)
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${GPUKIT_PACK_PYTHON:-/tmp/gpukit-pack-venv/bin/python}
[ -x "$py" ] || { python3 -m venv /tmp/gpukit-pack-venv && /tmp/gpukit-pack-venv/bin/pip install -q maturin; py=/tmp/gpukit-pack-venv/bin/python; }
"$py" -c "import sys; sys.path.insert(0, 'gpukit-python/build'); import gpukit_build; gpukit_build._build_preloads()"
[ $# -eq 0 ] && set -- --prewarm --wheel
exec ../shared/gpu/pack "$@"
