//! gpukit-sched (under construction in this session).
