// The sparse_decode_attn kernel and launcher, built by the host compiler under the emulator.
#include "optimized/sparse_attn.cu"
