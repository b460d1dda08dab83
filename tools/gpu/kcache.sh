# Sourced by the GPU-host scripts (B = the bundle): unless GPUKIT_CACHE_DIR is set, the kernel
# cache starts as a private copy of the bundle's prewarmed cache ($B/kcache, from
# `pack --prewarm`), so kernels load instead of compiling.
if [ -d "$B/kcache" ] && [ -z "${GPUKIT_CACHE_DIR:-}" ]; then
  export GPUKIT_CACHE_DIR=$(mktemp -d); cp -r "$B/kcache"/. "$GPUKIT_CACHE_DIR"/; chmod -R go-rwx "$GPUKIT_CACHE_DIR"
fi
