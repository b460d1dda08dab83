//! gpukit-offload (under construction in this session).
