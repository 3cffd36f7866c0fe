#include "optimized/backend.hpp"

#include <fmt/format.h>

#include <string_view>

#include "core/error.hpp"
#include "optimized/attention.hpp"
#include "optimized/dense.hpp"
#include "optimized/dspark.hpp"
#include "optimized/engram.hpp"
#include "optimized/moe.hpp"
#include "optimized/residual.hpp"
#include "optimized/vision.hpp"

#if defined(TANDEM_WITH_CUDA)
#include <cuda_runtime.h>
#endif

// Runs fn on the backend `opt` selects; without CUDA in the build, cuda is bad input.
#if defined(TANDEM_WITH_CUDA)
#define TANDEM_CUDA_OR_THROW(fn, ...) cuda_backend::fn(__VA_ARGS__)
#else
#define TANDEM_CUDA_OR_THROW(fn, ...) throw BadInput("backend cuda: " + cuda_status().detail)
#endif
#define TANDEM_DISPATCH(opt, fn, ...)                           \
  ((opt).backend == Backend::emu ? emu_backend::fn(__VA_ARGS__) \
                                 : TANDEM_CUDA_OR_THROW(fn, __VA_ARGS__))

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

ResidualBoundaryOutputs run_residual_boundary(const ResidualBoundaryInputs& in,
                                              const RunOptions& opt) {
  validate_residual_boundary(in);
  validate_block_threads(opt, 256, "residual kernels use ~200 registers per thread");
  return TANDEM_DISPATCH(opt, run_residual_boundary, in, opt);
}

ResidualStackOutputs run_residual_stack(const ResidualStackInputs& in, ResidualPath path,
                                        const RunOptions& opt) {
  validate_residual_inputs(in);
  validate_block_threads(opt, 256, "residual kernels use ~200 registers per thread");
  return TANDEM_DISPATCH(opt, run_residual_stack, in, path, opt);
}

EngramOutputs run_engram_layer(const EngramInputs& in, const RunOptions& opt) {
  validate_engram_inputs(in);
  return TANDEM_DISPATCH(opt, run_engram_layer, in, opt);
}

UnshuffleOutputs run_unshuffle(const Tensor<float>& grid, ActDType act, const RunOptions& opt) {
  validate_unshuffle_grid(grid);
  return TANDEM_DISPATCH(opt, run_unshuffle, grid, act, opt);
}

RopeOutputs run_rope_2d(const RopeInputs& in, ActDType act, const RunOptions& opt) {
  validate_rope_inputs(in);
  return TANDEM_DISPATCH(opt, run_rope_2d, in, act, opt);
}

MoeGateOutputs run_moe_gate(const MoeGateInputs& in, const RunOptions& opt) {
  validate_moe_gate_inputs(in);
  return TANDEM_DISPATCH(opt, run_moe_gate, in, opt);
}

VerifyOutputs run_dspark_verify(const VerifyInputs& in, const RunOptions& opt) {
  validate_verify_inputs(in);
  return TANDEM_DISPATCH(opt, run_dspark_verify, in, opt);
}

MoeExpertOutputs run_moe_experts(const MoeExpertInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  validate_moe_expert_inputs(in);
  return TANDEM_DISPATCH(opt, run_moe_experts, in, opt);
}

DenseOutputs run_dense_rows(const DenseInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  validate_dense_inputs(in);
  return TANDEM_DISPATCH(opt, run_dense_rows, in, opt);
}

AttentionOutputs run_attention_causal(const AttentionInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  validate_attention_inputs(in);
  return TANDEM_DISPATCH(opt, run_attention_causal, in, opt);
}

}  // namespace tandem
