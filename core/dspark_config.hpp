#pragma once
// DSpark's sizes (DESIGN 5.4) and the small backbone it drafts for; parsed in
// core/model_config.cpp.

namespace tandem {

// The most drafted tokens one verification pass checks (the kernel keeps K + 1 rows per request).
inline constexpr int kDsparkMaxDraft = 8;

// The public DSpark code's two guards in verification: p_d is clamped below at 1e-8 in the
// acceptance ratio (a token the drafter gave probability 0 is accepted with probability
// min(1, p_t / 1e-8)), and a residual max(0, p_t - p_d) of total mass <= 1e-8 is replaced by p_t.
inline constexpr float kDraftProbabilityFloor = 1e-8f;
inline constexpr float kResidualMassFloor = 1e-8f;

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

}  // namespace tandem
