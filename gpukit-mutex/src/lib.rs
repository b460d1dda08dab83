//! gpukit-mutex (under construction in this session).
