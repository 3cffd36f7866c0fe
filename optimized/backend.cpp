#include "optimized/backend.hpp"

#include <fmt/format.h>

#include <string_view>

#include "core/error.hpp"

#if defined(TANDEM_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace tandem {

const char* backend_name(Backend b) { return b == Backend::cuda ? "cuda" : "emu"; }

BackendStatus cuda_status() {
#if defined(TANDEM_WITH_CUDA)
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess)
    return {false, fmt::format("no CUDA device: {}", cudaGetErrorString(err))};
  if (count == 0) return {false, "no CUDA device: cudaGetDeviceCount found 0"};
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
    return {false, "cudaGetDeviceProperties failed"};
  return {true, fmt::format("{} (sm_{}{}, {} GiB)", prop.name, prop.major, prop.minor,
                            prop.totalGlobalMem >> 30)};
#else
  return {false, "built without CUDA (CPU-only build)"};
#endif
}

Backend best_backend() { return cuda_status().available ? Backend::cuda : Backend::emu; }

void validate_block_threads(const RunOptions& opt, int max, std::string_view why) {
  if (opt.block_threads < 32 || opt.block_threads > max || opt.block_threads % 32)
    throw_bad_input("--block-threads: a multiple of 32 in [32, {}] ({}), got {}", max, why,
                    opt.block_threads);
}

}  // namespace tandem
