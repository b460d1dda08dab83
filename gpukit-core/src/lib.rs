//! gpukit-core (under construction in this session).
