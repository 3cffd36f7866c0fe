// The topk_select kernel and launcher, built by the host compiler under the emulator.
#include "optimized/indexer.cu"
