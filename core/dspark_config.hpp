#pragma once
// DSpark's sizes (DESIGN 5.4) and the small backbone it drafts for; parsed in
// core/model_config.cpp.

#include <algorithm>

namespace tandem {

// The most drafted tokens one verification pass checks (the kernel keeps K + 1 rows per request).
inline constexpr int kDsparkMaxDraft = 8;

// The public DSpark code's two guards in verification: p_d is clamped below at 1e-8 in the
// acceptance ratio (a token the drafter gave probability 0 is accepted with probability
// min(1, p_t / 1e-8)), and a residual max(0, p_t - p_d) of total mass <= 1e-8 is replaced by p_t.
inline constexpr float kDraftProbabilityFloor = 1e-8f;
inline constexpr float kResidualMassFloor = 1e-8f;

// The training step's default set (reference::DrafterTraining): prompts x steps drafting
// positions, each holding up to gamma rows of vocab-wide teacher logits (float).
inline constexpr int kDsparkTrainingPrompts = 32, kDsparkTrainingSteps = 24;

struct DsparkConfig {
  int vocab = 257;           // backbone and drafter vocabulary
  int backbone_width = 16;   // the small backbone's hidden width
  int backbone_layers = 4;   // >= 3: target features read the last three layers
  int width = 32;            // drafter hidden width
  int blocks = 3;            // drafter transformer blocks
  int window = 128;          // sliding window over projected target features
  int gamma = 5;             // positions drafted per pass: the last token + gamma - 1 noise
  int markov_rank = 8;       // r of the Markov head W2^T W1[x_{k-1}]
  int requests = 16;         // verification case: requests per batch
  double temperature = 1.0;  // sampling temperature of backbone and drafter
};

// The multiply-adds of one drafting position of the training step (its rows' regression and
// argmax over the vocabulary, the drafter's pass, the backbone's logits).
inline double dspark_training_work_per_position(const DsparkConfig& c) {
  const double heads = c.width + c.markov_rank;
  return c.gamma * (2.0 * heads * c.vocab + 4.0 * c.width * c.width * c.blocks) +
         2.0 * c.backbone_width * c.vocab;
}

// The training step's memory (bytes) and work (multiply-adds) for `prompts` prompts of
// `prompt_tokens` decoded `steps` tokens each, training and held-out sets: the teacher logits
// (float), each example's newest window of features, the Markov head's bigram rows (a row per
// token seen) and their Gram matrix, the heads' normal equations.
struct DsparkTrainingCost {
  double bytes = 0, work = 0;
};
inline DsparkTrainingCost dspark_training_cost(const DsparkConfig& c, int prompts,
                                               int prompt_tokens, int steps) {
  const double positions = double(prompts) * steps, rows = positions * std::min(c.gamma, steps);
  const double seen = std::min(double(c.vocab), double(prompts) * (prompt_tokens + steps));
  const double window = std::min(double(c.window), double(prompt_tokens + steps));
  const double heads = c.width + c.markov_rank, V = c.vocab;
  return {2 * (4 * rows * V + 8 * positions * window * 3.0 * c.backbone_width) +
              8 * seen * (V + seen) + 8 * heads * (heads + V),
          2 * positions * dspark_training_work_per_position(c) + seen * seen * (V + seen)};
}

// The prompts verify's decode rows train on: kDsparkTrainingPrompts, fewer (at least 4) where the
// vocabulary makes that set cost more than 2e9 multiply-adds (the release's 32768-token slice:
// 4). The config's budget counts this set.
inline int dspark_training_prompts(const DsparkConfig& c) {
  const double per_prompt = kDsparkTrainingSteps * dspark_training_work_per_position(c);
  const double fit = 2e9 / per_prompt;
  return fit >= kDsparkTrainingPrompts ? kDsparkTrainingPrompts : fit < 4 ? 4 : int(fit);
}

}  // namespace tandem
