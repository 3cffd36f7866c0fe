#pragma once
// DSpark's sizes (DESIGN 5.4) and the small backbone it drafts for; parsed in
// core/model_config.cpp.

#include <algorithm>
#include <optional>

#include "core/attention_lora.hpp"
#include "core/device_limits.hpp"
#include "core/vision_config.hpp"  // the MoE kernels' limits

namespace tandem {

// The most drafted tokens one verification pass checks (the kernel keeps K + 1 rows per request).
inline constexpr int kDsparkMaxDraft = 8;
// The largest Markov rank r the Markov step kernel takes (a warp stages one W1 row in shared
// memory; the release's is 256).
inline constexpr int kMarkovMaxRank = 1024;

// The public DSpark code's two guards in verification: p_d is clamped below at 1e-8 in the
// acceptance ratio (a token the drafter gave probability 0 is accepted with probability
// min(1, p_t / 1e-8)), and a residual max(0, p_t - p_d) of total mass <= 1e-8 is replaced by p_t.
inline constexpr float kDraftProbabilityFloor = 1e-8f;
inline constexpr float kResidualMassFloor = 1e-8f;

// The training step's default set (reference::DrafterTraining): prompts x steps drafting
// positions, each holding up to gamma rows of vocab-wide teacher logits (float).
inline constexpr int kDsparkTrainingPrompts = 32, kDsparkTrainingSteps = 24;
// The tokens of a training prompt and of a verify decode row's prompt (which decodes
// kDsparkTrainingSteps tokens after it).
inline constexpr int kDsparkTrainingPromptTokens = 6;
// The cached positions before the seeded drafter's verify row (a config with decode sizes: the
// section's drafter at the release's widths, where main_proj costs 78.6M multiply-adds a row).
inline constexpr int kDsparkSeededContext = 8;

// The drafter's stages run on the model's window store, sparse attention and dense rows
// (problem/kvcache.hpp, problem/sparse_attn.hpp, problem/dense.hpp; reference/drafter.cpp and
// optimized/drafter.cpp assert these against their limits): the width a multiple of 8 (16-byte
// bf16 packs) up to 8192; the heads a multiple of 4 (a head group) up to 112, the output
// projection's heads x 512 inputs being a row dense_rows stages in shared memory (at most what
// sm_90 grants a block: 58112 floats; the end-to-end model has the same bound); the target
// features (3 x backbone width, main_proj's row) a multiple of 4 floats in the same, so the
// backbone width a multiple of 4 up to 19368 (V4.1-Flash's 5120 and V4-Pro's 7168 among them).
inline constexpr int kDsparkWidthStep = 8, kDsparkMaxWidth = 8192;
inline constexpr int kDsparkRowFloats = int(kMaxDynamicShared / sizeof(float));
inline constexpr int kDsparkHeadStep = 4;
inline constexpr int kDsparkMaxHeads = kDsparkRowFloats / 512 / kDsparkHeadStep * kDsparkHeadStep;
inline constexpr int kDsparkBackboneWidthStep = 4;
inline constexpr int kDsparkMaxBackboneWidth =
    kDsparkRowFloats / 3 / kDsparkBackboneWidthStep * kDsparkBackboneWidthStep;

// The sizes verify's decode rows train their drafter at, when a section's "decode" object sets
// them (README "Config sections and the release's widths"): the training step fits
// vocabulary-wide heads in closed form over a small backbone whose width is the features', and
// at the release's widths (5120 both) the fit and the backbone need ~86 GB. The section's own
// sizes are the drafter row's.
struct DsparkDecodeSizes {
  int width = 0, backbone_width = 0, markov_rank = 0;
  AttentionLora lora;
};

struct DsparkConfig {
  int vocab = 257;           // backbone and drafter vocabulary
  int backbone_width = 16;   // the small backbone's hidden width
  int backbone_layers = 4;   // >= 3: target features read the last three layers
  int width = 32;            // drafter hidden width
  int blocks = 3;            // drafter stages (mHC blocks: window attention, then a small MoE)
  int window = 128;          // sliding window over projected target features
  int gamma = 5;             // positions drafted per pass: the last token + gamma - 1 noise
  int markov_rank = 8;       // r of the Markov head W2^T W1[x_{k-1}]
  int heads = 4;             // a stage's attention heads (each 512 wide, one K == V record)
  AttentionLora lora;        // their q_lora_rank, o_groups, o_lora_rank
  int experts = 4;           // a stage's routed experts (plus one shared expert)
  int top_k = 2;             // routed experts per position
  int expert_hidden = 64;    // an expert's hidden width
  int noise_id = 256;        // the token id of the block's noise positions (as released 128799)
  double norm_eps = 1e-6;    // the stages' and head's RMSNorm epsilon (V4.1: 1e-20)
  int requests = 16;         // verification case: requests per batch
  double temperature = 1.0;  // sampling temperature of backbone and drafter
  std::optional<DsparkDecodeSizes> decode;  // none: the decode rows train at the sizes above
};

// The config of verify's decode rows and their trained drafter: c at its decode sizes.
inline DsparkConfig dspark_decode_config(DsparkConfig c) {
  if (c.decode) {
    c.width = c.decode->width, c.backbone_width = c.decode->backbone_width;
    c.markov_rank = c.decode->markov_rank, c.lora = c.decode->lora;
  }
  c.decode.reset();
  return c;
}

// Stages the kernels run: the window store's widths, sparse attention's heads, the MoE gate's
// experts and top-k, the experts kernel's hidden widths.
inline bool dspark_stage_shape_ok(const DsparkConfig& c) {
  return c.width >= kDsparkWidthStep && c.width <= kDsparkMaxWidth &&
         c.width % kDsparkWidthStep == 0 && c.heads >= kDsparkHeadStep &&
         c.heads <= kDsparkMaxHeads && c.heads % kDsparkHeadStep == 0 && c.experts >= 1 &&
         c.experts <= kMoeMaxExperts && c.top_k >= 1 &&
         c.top_k <= std::min(kMoeMaxTopK, c.experts) && c.expert_hidden >= kMoeHiddenStep &&
         c.expert_hidden <= kMoeMaxHidden && c.expert_hidden % kMoeHiddenStep == 0;
}

// The multiply-adds of one drafter pass after `context` cached positions (the window reads the
// newest `window` of them): the target features' projection and each stage's injection (its wkv
// over every window row), then per drafted position and stage the two mHC sites (24 x 4d each),
// the queries, the block's own record, the attention over window + block, the output
// projection, the router and top_k + 1 experts.
inline double dspark_pass_work(const DsparkConfig& c, int context) {
  const double d = c.width, D = 512, H = c.heads, rows = std::min(c.window, context);
  const double per_position =
      2 * 24 * 4 * d + attention_projection_values(c.lora, c.heads, c.width) + D * d +
      2 * H * D * (rows + c.gamma) + c.experts * d + 3.0 * (c.top_k + 1) * d * c.expert_hidden;
  return rows * 3.0 * c.backbone_width * d + c.blocks * rows * D * d +
         c.gamma * (c.blocks * per_position + d * c.vocab);
}
// Whether the reference holds its stages' query and output LoRAs (generated once) rather than
// generating a stage's where its attention runs (the release's are 124M values a stage).
inline bool dspark_holds_loras(const DsparkConfig& c) {
  return c.blocks * attention_projection_values(c.lora, c.heads, c.width) <=
         double(kMoeMaterialisedValues);
}

// Whether the drafter holds its unembedding from the start (the training's passes read it whole)
// rather than generating it a chunk at a time until the training fits it.
inline bool dspark_holds_unembed(const DsparkConfig& c) {
  return double(c.vocab) * c.width <= double(kMoeMaterialisedValues);
}

// A drafter pass's memory (bytes), an upper bound: the weights held in double, in float and in
// the float baseline's copy (the Markov heads, the target features' projection, the stages'
// sites and routers, and their LoRAs and experts where small), the unembedding in float where
// held or fitted and a chunk of it in double; then the larger of what the reference generates
// at a time (a stage's LoRAs and an expert, in double) and what a kernel launch reads (the
// routed experts of the gamma positions and the largest LoRA matrix, host and device copies).
inline double dspark_drafter_bytes(const DsparkConfig& c, bool fitted) {
  const double d = c.width, D = 512, V = c.vocab, H = c.heads * D,
               expert = 3.0 * d * c.expert_hidden;
  const double lora = attention_projection_values(c.lora, c.heads, c.width);
  double held = V * 2 * c.markov_rank + 3.0 * c.backbone_width * d +
                c.blocks * (2 * 24 * 4 * d + D * d + c.experts * d);
  double reference = 0, launch = 0;
  if (dspark_holds_loras(c))
    held += c.blocks * lora;
  else
    reference += 8 * lora,
        launch += 8 * std::max({double(c.lora.q_rank) * H, double(c.lora.o_groups) * c.lora.o_rank *
                                                               std::max(H / c.lora.o_groups, d)});
  if (moe_materialises_every_expert(c.experts + 1, c.expert_hidden, c.width))
    held += c.blocks * (c.experts + 1) * expert;
  else
    reference += 8 * expert,
        launch += 8 * std::min<double>(c.experts + 1, c.gamma * c.top_k + 1) * expert;
  const double unembed = (fitted || dspark_holds_unembed(c) ? 4 * V * d : 0) +
                         8 * std::min<double>(V, kUnembedChunkRows) * d;
  return 16 * held + unembed + std::max(reference, launch);
}

// The multiply-adds of one drafting position of the training step whose texts are `context`
// tokens long: its rows' regression and argmax over the vocabulary, the drafter's pass over the
// window of the text before it, the backbone's logits.
inline double dspark_training_work_per_position(const DsparkConfig& c, int context) {
  const double heads = c.width + c.markov_rank;
  return c.gamma * 2.0 * heads * c.vocab + dspark_pass_work(c, context) +
         2.0 * c.backbone_width * c.vocab;
}

// The training step's memory (bytes) and work (multiply-adds) for `prompts` prompts of
// `prompt_tokens` decoded `steps` tokens each: the teacher logits (float), each example's newest
// window of features, the Markov head's bigram rows (a row per token seen) and their Gram
// matrix, the heads' normal equations. held_out: the training report's held-out set as well
// (its texts, and the drafter's passes over it before and after the fit); verify's rows train
// without it.
struct DsparkTrainingCost {
  double bytes = 0, work = 0;
};
inline DsparkTrainingCost dspark_training_cost(const DsparkConfig& c, int prompts,
                                               int prompt_tokens, int steps, bool held_out) {
  const double positions = double(prompts) * steps, rows = positions * std::min(c.gamma, steps);
  const double seen = std::min(double(c.vocab), double(prompts) * (prompt_tokens + steps));
  const double window = std::min(double(c.window), double(prompt_tokens + steps));
  const double heads = c.width + c.markov_rank, V = c.vocab;
  const double texts = held_out ? 2 : 1, passes = held_out ? 3 : 1;
  return {texts * (4 * rows * V + 8 * positions * window * 3.0 * c.backbone_width) +
              8 * seen * (V + seen) + 8 * heads * (heads + V),
          passes * positions * dspark_training_work_per_position(c, prompt_tokens + steps) +
              seen * seen * (V + seen)};
}

// The prompts verify's decode rows train on: kDsparkTrainingPrompts, fewer (at least 4) where the
// vocabulary makes that set cost more than 2e9 multiply-adds (the release's 32768-token slice:
// 4). The config's budget counts this set.
inline int dspark_training_prompts(const DsparkConfig& c) {
  const double per_prompt =
      kDsparkTrainingSteps *
      dspark_training_work_per_position(c, kDsparkTrainingPromptTokens + kDsparkTrainingSteps);
  const double fit = 2e9 / per_prompt;
  return fit >= kDsparkTrainingPrompts ? kDsparkTrainingPrompts : fit < 4 ? 4 : int(fit);
}

}  // namespace tandem
