// The dense_rows kernel and launcher, built by the host compiler under the emulator.
#include "optimized/dense.cu"
