//! GEMM: FP32 and TF32 kernels of our own beside cuBLAS (being built in this session).
