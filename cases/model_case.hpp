#pragma once
// The end-to-end tiny model case: a prompt (and, through ModelReferenceSequence, later chunks such
// as decode steps) through the reference (truth in double, baseline in float with plain-order
// sums) and the optimized model, compared tap by tap in execution order; the first failing tap is
// where the two models diverge. Shared by tests, verify and golden.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cases/tensor_check.hpp"
#include "optimized/model.hpp"
#include "reference/model.hpp"

namespace tandem {

// The values an end-to-end model run holds or generates at once: its held weights (Engram's
// tables included) and the largest matrix it generates where used. Each sits in a few copies (the
// truth's double, the float runs', the emulator's device copy): configs past kMaxModelValues
// (2^30: ~9 GB, on a 24 GB machine beside another verify row) are BadInput naming `source`.
// Measured: 6.5 GB peak for V4.1-Flash's ~7.3e8 (~9 bytes a value: the truth's and the
// baseline's generated matrices exist at once since they run side by side).
inline constexpr double kMaxModelValues = double(1 << 30);
void check_model_size(const ModelConfig& m, const std::string& source);

// The reference's weights as the optimized model's float tensors (exact: every weight is a
// float value).
ModelWeights optimized_model_weights(const reference::TinyModelWeights& w);

// The verification prompt (reference::make_prompt_image) as patches; image = false keeps only
// the text ids.
ModelPrompt model_prompt(const ModelConfig& m, uint64_t seed, bool image);

struct ModelReference {
  std::vector<reference::Tap> truth, baseline;
  reference::ForcedTaps forced;  // the records both read (empty: their own)
};
// The taps of a run another reads in its place (reference::ForcedTaps): records, queries and
// attention outputs.
reference::ForcedTaps model_forced_taps(const ModelRun& run);
// Truth and baseline; given the optimized run `forced`, both read its cache records and, where
// they are the other correct bf16 rounding of their own, its stored queries and attention
// outputs (reference::ForcedTaps), so the taps after them compare given the same stored inputs.
ModelReference run_model_reference(const ModelConfig& m, const reference::TinyModelWeights& w,
                                   const ModelPrompt& p, const ModelRun* forced = nullptr);
// The float baseline alone, one run in the given order: what the emulator's speed is measured
// against (bench/model_bench).
std::vector<reference::Tap> run_model_baseline(const ModelConfig& m,
                                               const reference::TinyModelWeights& w,
                                               const ModelPrompt& p);
// A prompt (its image embedded by the image path's kernels first) appended to `model`, whose
// weights are w; run_model: to a new one.
ModelRun append_model(OptimizedModel& model, const ModelWeights& w, const ModelPrompt& p,
                      const RunOptions& opt);
ModelRun run_model(const ModelConfig& m, const ModelWeights& w, const ModelPrompt& p,
                   const RunOptions& opt);
// The greedy next token of a run: the argmax of its last logits row (the last tap).
int32_t greedy_token(const ModelRun& run);

// The reference beside an OptimizedModel appending chunk by chunk (a prefill, then decode
// steps): truth and baseline keep their own caches, each chunk read with the optimized chunk's
// forced taps (run_model_reference), and the chunk's taps are checked as check_model checks a
// prompt (a redraw of the baseline replays every chunk so far). m and w outlive it.
class ModelReferenceSequence {
 public:
  ModelReferenceSequence(const ModelConfig& m, const reference::TinyModelWeights& w);
  std::vector<TensorCheck> append(const ModelPrompt& chunk, const ModelRun& optimized);

 private:
  const ModelConfig& m_;
  const reference::TinyModelWeights& w_;
  reference::TinyModelT<double> truth_;
  reference::TinyModelT<float> baseline_;
  std::vector<std::pair<ModelPrompt, reference::ForcedTaps>> chunks_;
};

// One check per tap, in execution order: the routing (".experts") and the selections
// (".selection") bit-exact; records (".records") exact and each the encoding of the stored
// values tapped before it, whose check is bf16's tolerance per record; every other tap by the
// tolerance policy with a row per token (its values share the token's norms, mixing
// coefficients and reductions, as in the residual case). A tap missing on either side fails.
std::vector<TensorCheck> compare_model(const ModelReference& ref, const ModelRun& out);

// The model's taps cannot be permuted back the way one kernel's inputs can, so its baseline is
// drawn again with every reduction of the float reference in other orders
// (reference::ScopedSumOrder), keeping per element the draw farthest from truth (README,
// tolerance refinement 2). A run routed differently from the truth is not used.
void widen_model_baseline(const ModelConfig& m, const reference::TinyModelWeights& w,
                          const ModelPrompt& p, ModelReference& ref);
// compare_model, and where a check fails, compare_model again after widen_model_baseline: more
// draws only widen a budget, so a run within the one-draw budget passes without their 31
// reference runs (its reported margins are then against the narrower budget).
std::vector<TensorCheck> check_model(const ModelConfig& m, const reference::TinyModelWeights& w,
                                     const ModelPrompt& p, ModelReference& ref,
                                     const ModelRun& out);
// The same for any run compared by compare_model (the DSpark drafter's pass): `draw` runs the
// float baseline once (reading ref.forced) in the current sum order.
std::vector<TensorCheck> check_widening(ModelReference& ref, const ModelRun& out,
                                        const std::function<std::vector<reference::Tap>()>& draw);

}  // namespace tandem
