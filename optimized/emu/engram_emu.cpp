// The Engram kernels and launchers, built by the host compiler under the emulator.
#include "optimized/engram.cu"
