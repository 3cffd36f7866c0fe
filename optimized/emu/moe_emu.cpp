// The MoE expert kernel and launcher, built by the host compiler under the emulator.
#include "optimized/moe.cu"
