#pragma once
// DSpark's drafter pass on the optimized kernels (DESIGN 5.4 as released): the twin of
// reference::DsparkDrafter::draft_taps, tap for tap, built from the model's kernels.
//   features (newest `window` rows) -> dense_rows (main_proj) -> residual_rmsnorm (main_norm);
//   the block [last, noise x (gamma - 1)] on 4 streams; per stage:
//     residual boundary (opens the attention site) -> kv_window_store over [context ; block]
//       (the injected rows and the block's own, positions start.., a ring of W + gamma slots)
//     -> dense_rows (wq) -> rope_queries -> sparse attention over every slot from every block
//       position (non-causal, the window only) -> dense_rows (wo)
//     -> residual boundary (closes it, opens the MoE site) -> dense_rows (router) -> moe gate
//       -> moe experts (the shared expert as one more expert at weight 1);
//   residual boundary (closes the last site, opens the head: its norm with the carried pre)
//   -> dense_rows (unembed); then, for K > 0 drafted tokens, the Markov step kernel
//   (dspark_markov_draft: the Markov head left to right, the confidence, the choice).
// Activations f32 between kernels (the kernels round where they store bf16: window rows, queries,
// attention output), as the end-to-end model runs them.
#include <cstdint>

#include "core/dspark_config.hpp"
#include "optimized/backend.hpp"
#include "problem/drafter.hpp"
#include "problem/model.hpp"

namespace tandem {

// One pass on features [T, feature_dim] from position `first` on (T may be 0) after the last
// token, then the first K (0..gamma) drafted tokens chosen as `choice` says; taps as
// reference::DsparkDrafter::draft_taps names them. Weights and inputs are validated first
// (BadInput); a launch refusing an earlier launch's output is a KernelFault.
ModelRun run_drafter(const DsparkConfig& c, const DrafterWeights& w, const Tensor<float>& features,
                     int32_t last, int64_t first, int K, const DraftChoice& choice,
                     const RunOptions& opt);

}  // namespace tandem
