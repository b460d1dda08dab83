//! Cold NVRTC compile vs in-memory hit vs disk hit (a new cache object over a warm directory).
fn main() {}
