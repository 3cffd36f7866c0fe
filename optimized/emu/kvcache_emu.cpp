// The KV cache kernels and launchers, built by the host compiler under the emulator.
#include "optimized/kvcache.cu"
