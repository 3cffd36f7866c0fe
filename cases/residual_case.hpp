#pragma once
// Residual cases: seeded input generation and serialisation to safetensors, shared by the
// golden files, `tandem verify`, the property tests and the benchmarks.
#include <cstdint>

#include "cases/case_util.hpp"  // kMinRowErrorDraws
#include "cases/tensor_check.hpp"
#include "core/compare.hpp"
#include "core/safetensors.hpp"
#include "optimized/residual.hpp"
#include "reference/residual.hpp"

namespace tandem {

// Seeded, never all-zero inputs; activations are rounded to `act` so the reference and kernels
// start from the same values. `sublayer_gain` scales W_sub (0 gives f = 0).
ResidualStackInputs make_residual_inputs(const ResidualConfig& cfg, int64_t tokens, ActDType act,
                                         uint64_t seed, float sublayer_gain = 1.0f);

// The inputs into a blob, through for_each_tensor (problem/residual.hpp): the golden cases' and
// the property tests' failure dumps.
void put_residual_inputs(Safetensors& st, const ResidualStackInputs& in);

}  // namespace tandem

namespace tandem {

// The baseline's error scale from several draws: the float baseline runs on the problem as given
// and with its hidden dimension reversed, rotated and shuffled (every d-reduction in another
// order, the outputs mapped back; baseline_orders: a token's d-vector holds kMinRowErrorDraws
// draws); per element the run farthest from truth is kept. One naive run is a
// single draw of the same-precision error; with few independent error sources (tiny d, where
// the per-token coefficients dominate) a single draw is often far below its typical size.
reference::ResidualRefOutputs baseline_error_draws(const ResidualStackInputs& in, ResidualPath path,
                                                   const reference::ResidualRefOutputs& truth,
                                                   int64_t min_row_draws = kMinRowErrorDraws);
// Runs widened where a check fails (check_residual_stack).
inline constexpr int64_t kWideBaselineRuns = 32;
// compare_residual against baseline_error_draws; where a check fails, again against
// kWideBaselineRuns runs (more draws only widen a budget, so a stack within the narrower one
// passes without them; a wrong stack fails both).
std::vector<TensorCheck> check_residual_stack(const ResidualStackInputs& in, ResidualPath path,
                                              const reference::ResidualRefOutputs& truth,
                                              const ResidualStackOutputs& optimized);

// Compares every tap in execution order (site0.y, site0.x, site1.y, ...), then y_out and x_out.
// The first failing entry is where the optimized model diverged.
std::vector<TensorCheck> compare_residual(const reference::ResidualRefOutputs& truth,
                                          const reference::ResidualRefOutputs& baseline,
                                          const ResidualStackOutputs& optimized, ActDType act);

// One boundary (run_residual_boundary): truth, and the baseline drawn as above (the hidden
// dimension in baseline_orders); checks x, y and the opened site's coefficients as
// far as the boundary produces them.
struct ResidualBoundaryReference {
  reference::ResidualBoundaryRef truth, baseline;
};
ResidualBoundaryReference run_residual_boundary_reference(
    const ResidualBoundaryInputs& in, int64_t min_row_draws = kMinRowErrorDraws);
std::vector<TensorCheck> compare_residual_boundary(const ResidualBoundaryReference& ref,
                                                   const ResidualBoundaryOutputs& out,
                                                   ActDType act);
// compare_residual_boundary, and where a check fails, again against kWideBaselineRuns runs (as
// check_residual_stack).
std::vector<TensorCheck> check_residual_boundary(const ResidualBoundaryInputs& in,
                                                 const ResidualBoundaryOutputs& out);

// Activation bytes per token per site that each path moves by design (DESIGN 5.1):
// V4 unfused 20d, V4.1 single pass 10d, times the element size.
uint64_t residual_activation_bytes_per_site(ResidualPath path, int d, ActDType act);
// The activation bytes the emulator counted in `launches` for each site's residual kernels
// (all tokens; the sublayer stand-in and the V4.1 first-site prologue excluded).
std::vector<uint64_t> counted_activation_bytes_per_site(const LaunchLog& launches,
                                                        ResidualPath path);

}  // namespace tandem
