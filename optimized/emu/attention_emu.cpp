// The causal attention kernel and launcher, built by the host compiler under the emulator.
#include "optimized/attention.cu"
