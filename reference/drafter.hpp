#pragma once
// DSpark's drafter as released (DESIGN 5.4), reference in double. The draft block [last token,
// noise id x (gamma - 1)] is embedded and widened to the 4 residual streams, then passes 3 stages,
// each a full mHC block with the V4.1 recipe shift (a site collapses with the pre made at the
// previous site; the first with [1, 0, 0, 0]): window-only attention, then a small MoE (routed
// experts, top-k of sqrt(softplus) scores, route scale 1.5, plus one shared expert). The target
// features of the newest `window` cached positions go through main_proj and main_norm; each
// stage's own wkv writes them into its window KV ("KV injection"): the model's window records
// (reference/kvcache.hpp kv_window_store: bf16 rows in, RMSNorm, RoPE on the last 64 of 512 dims
// at the position, v41_window FP8). The block's own records follow at the next positions; the
// model's sparse attention (reference/sparse_attn.hpp: heads of 512, RoPE'd bf16 queries, a
// per-head sink, the output's RoPE dims turned back) reads every record from every block
// position (not causal inside the block).
// The head collapses with the last site's pre (V4.1 has no hc_head), norms and unembeds.
// A Markov head adds W2^T W1[x_{k-1}] (rank r) while tokens are chosen left to right, so the
// draft is a sequence; a confidence head gives c_k = sigmoid(w . [h_k before the final norm ;
// W1[x_{k-1}]]) for the scheduler. Positions are the sequence's: the window's records are those a
// ring kept across steps would hold.
#include <Eigen/Dense>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/dspark_config.hpp"
#include "problem/drafter.hpp"
#include "reference/backbone.hpp"
#include "reference/model.hpp"  // Tap
#include "reference/model_cache.hpp"
#include "reference/residual.hpp"

namespace tandem::reference {

using DraftChoice = tandem::DraftChoice;

struct Draft {
  std::vector<int32_t> tokens;              // [K]
  Eigen::MatrixXd logits;                   // [K, V] including the Markov head
  std::vector<std::vector<float>> p_draft;  // [K][V] the distributions the tokens came from
  std::vector<double> confidence;           // [K] c_k
};

// One training example: the target features the drafter reads before drafting after `last` (one
// row per cached position: the text before `last`), the backbone's greedy continuation after it
// (1..gamma tokens: what greedy verification accepts) and the backbone's logits that chose each
// of them ([next.size(), V], kept in float: a release vocabulary's rows are what training holds).
// Only the newest `window` feature rows are kept (the drafter reads no others), from position
// `first` on.
struct DrafterExample {
  Eigen::MatrixXd features;
  int64_t first = 0;
  int32_t last = 0;
  std::vector<int32_t> next;
  Eigen::MatrixXf teacher_logits;
};

// DSpark's training step (issue 15 item 3), the backbone frozen: on seeded prompts the backbone
// decodes greedily, and the drafter's heads are fitted to it in closed form (ridge regression:
// deterministic, no learning rate, no iterations). The Markov head's input side W1 is the rank-r
// factorisation of the backbone's mean logits after each token (its bigram part); the output head
// and the Markov head's output side W2 are one linear map of [h_k ; W1[x_{k-1}]], fitted to the
// backbone's centred logits at each continuation position (distillation: greedy verification
// needs its argmax, sampled verification its distribution); the confidence head to +-2 (sigmoid
// 0.88 / 0.12) for whether the fitted head's argmax is the backbone's token.
// Teacher forcing: position k reads the backbone's tokens before it, as an accepted draft does.
struct DrafterTraining {
  int prompts = kDsparkTrainingPrompts;             // prompts per set
  int prompt_tokens = kDsparkTrainingPromptTokens;  // tokens per prompt
  int steps = kDsparkTrainingSteps;                 // greedy tokens decoded after each prompt
  double ridge = 1e-3;           // lambda x rows x I added to the normal equations
  uint32_t prompt_key = 9;       // Philox key of the training prompts (verify's decode rows: 7)
  uint32_t held_out_key = 10;    // and of the held-out prompts the report measures acceptance on
  bool measure_held_out = true;  // false: the report's held_out_* stay empty (the drafter only)
};

struct TrainingReport {
  int64_t examples = 0;              // drafting positions (prompts x continuation tokens)
  std::vector<int64_t> rows;         // [gamma] fitted rows per draft position
  std::vector<double> fit_accuracy;  // [gamma] teacher-forced argmax == the backbone's token
  // Greedy acceptance on the held-out prompts, per draft position given the earlier ones
  // accepted (DsparkDrafter::greedy_acceptance), before and after the fit.
  std::vector<double> held_out_before, held_out_after;
};

class DsparkDrafter {
 public:
  // feature_dim: width of a target feature row (3 x the backbone width). Weights are seeded
  // float values (DrafterWeights: the kernels' copy is the same).
  DsparkDrafter(const DsparkConfig& c, int64_t feature_dim, uint64_t seed);

  // The one pass: final hidden states h_k [gamma, width] (collapsed: before the final norm,
  // which the confidence head reads; hidden: after it) and their logits [gamma, V] before the
  // Markov head; `stage_y` the attention input of each stage [blocks][gamma, width] (a tap for
  // the properties). features: [T, feature_dim], one row per cached position from position
  // `first` on (T may be 0; a caller holding only the newest rows passes their first position),
  // read as float (the kernels' input).
  struct PassOutputs {
    Eigen::MatrixXd collapsed, hidden, logits;
    std::vector<Eigen::MatrixXd> stage_y;
  };
  PassOutputs forward(const Eigen::MatrixXd& features, int32_t last, int64_t first = 0) const;

  // The same pass, then the first K (0..gamma) drafted tokens, as named taps in execution order,
  // in scalar S (double: the truth; float with plain-order sums: the tolerance policy's
  // baseline), names as the model's (problem/model.hpp): "context" (the projected, normed
  // features; left out with none), per stage b "stage{b}.attn.y", ".attn.window" (+ ".records":
  // the injected rows, then the block's), ".attn.q_proj", ".attn.q", ".attn.o", ".attn.f",
  // ".attn.x", ".moe.y", ".moe.experts" (the routed ones), ".moe.f", ".moe.x"; "head.y",
  // "logits"; with K > 0 the Markov step's "draft.logits" [K, V], "draft.p" [K, V],
  // "draft.confidence" [K] and "draft.tokens" [K] (the draft's own choices). `forced`: another
  // run's records, queries and attention outputs read in place of the pass's own
  // (reference::ForcedTaps), and its "draft.tokens" as the tokens each Markov step follows.
  template <class S>
  std::vector<Tap> draft_taps(const Eigen::MatrixXd& features, int32_t last, int64_t first, int K,
                              const DraftChoice& choice, const ForcedTaps* forced) const;

  // The first K (<= gamma) drafted tokens after `last`.
  Draft propose(const Eigen::MatrixXd& features, int32_t last, int K, const DraftChoice& choice,
                int64_t first = 0) const;

  const DsparkConfig& config() const { return c_; }
  // The weights as the kernels take them (after fit_heads: the fitted heads, rounded to float).
  const DrafterWeights& weights() const { return w_; }

  // Fits the Markov, output and confidence heads to `examples` (DrafterTraining); the fitted
  // heads are rounded to float (the kernels' copy). Examples must be of this drafter's shapes
  // (BadInput otherwise), and there must be one.
  TrainingReport fit_heads(const std::vector<DrafterExample>& examples, double ridge);
  // What greedy verification of a whole greedy draft accepts on `examples`: per draft position
  // k, of the examples whose continuation reaches k and whose drafts before k were accepted, the
  // share whose k-th draft is the backbone's token. [gamma]
  std::vector<double> greedy_acceptance(const std::vector<DrafterExample>& examples) const;

 private:
  // The weights in scalar S (the float values of w_), row-major [out, in].
  template <class S>
  struct Params {
    struct Stage {
      Site<S> attn_site, ffn_site;  // mHC sites (their w_sub unused)
      // The attention's query and output LoRAs when held (dspark_holds_loras), else generated
      // where the attention runs.
      std::optional<LoraMats<S>> lora;
      Mat<S> router;           // [experts, width]
      ExpertTable<S> experts;  // routed experts, then the shared one
    };
    // [width, F], W1, W2 (the embeddings are read from DrafterWeights where used)
    Mat<S> main_proj, markov_in, markov_out;
    Vec<S> main_norm, head_norm, confidence;
    std::vector<Stage> stages;
  };
  template <class S>
  Params<S> params_of(const DrafterWeights& w) const;
  using Streams = std::vector<Mat<double>>;
  template <class S>
  PassOutputs pass(const Params<S>& p, const Eigen::MatrixXd& features, int32_t last, int64_t first,
                   const TapSink& tap, const ForcedTaps* forced) const;
  // Stage b's attention for the block rows y: the window's KV (the injected context rows, then
  // the block's own, at positions start .. start + W + gamma - 1, as v41_window records) read by
  // every block position (positions start + W ..). [gamma] rows of [width]
  template <class S>
  std::vector<Vec<S>> attention(const Params<S>& p, int b, const std::vector<Vec<S>>& context,
                                const std::vector<Vec<S>>& y, int64_t start, const TapSink& tap,
                                const ForcedTaps* forced) const;
  template <class S>
  std::vector<Vec<S>> moe(const Params<S>& p, int b, const std::vector<Vec<S>>& y,
                          const TapSink& tap) const;
  // The Markov and confidence heads over a pass, left to right (problem/dspark.hpp
  // MarkovDraftInputs), in S; `follow`: the tokens each step follows in place of its own choice.
  template <class S>
  Draft markov(const Params<S>& p, const PassOutputs& pass, int32_t last, int K,
               const DraftChoice& choice, const Tensor<float>* follow) const;
  // A fitted head into the weights (rounded to float) and the double parameters.
  void set_head(Tensor<float>& weight, Mat<double>& param, const Eigen::MatrixXd& value);
  void fit_markov_in(const std::vector<DrafterExample>& examples);
  void check_examples(const std::vector<DrafterExample>& examples) const;

  DsparkConfig c_;
  ResidualConfig mhc_;  // the sites' mixing (V4.1's 20 Sinkhorn iterations, hc_eps 1e-6; norm_eps)
  int64_t feature_dim_;
  DrafterWeights w_;
  Params<double> p_;  // w_ in double
};

// The backbone's greedy continuations of `t.prompts` prompts (Philox key `key`) as examples
// (every position from the prompt's last token on, with the continuation's next <= gamma tokens)
// for a drafter of config `c`.
std::vector<DrafterExample> greedy_examples(Backbone& model, const DsparkConfig& c, uint64_t seed,
                                            uint32_t key, const DrafterTraining& t);

// A drafter trained on its backbone: the seeded DsparkDrafter(c, 3 x backbone width, seed), its
// heads fitted on greedy_examples of TinyBackbone(c.vocab, c.backbone_width, seed,
// c.backbone_layers), the backbone verify's decode rows run.
struct TrainedDrafter {
  DsparkDrafter drafter;
  TrainingReport report;
};
TrainedDrafter trained_drafter(const DsparkConfig& c, uint64_t seed, const DrafterTraining& t = {});

}  // namespace tandem::reference
