// The vision kernels and launchers, built by the host compiler under the emulator.
#include "optimized/vision.cu"
