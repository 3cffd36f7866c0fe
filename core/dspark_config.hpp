#pragma once
// DSpark's sizes (DESIGN 5.4) and the small backbone it drafts for; parsed in
// core/model_config.cpp.

namespace tandem {

// The most drafted tokens one verification pass checks (the kernel keeps K + 1 rows per request).
inline constexpr int kDsparkMaxDraft = 8;

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
