// DSpark verification, built by the host compiler under the emulator.
#include "optimized/dspark.cu"
