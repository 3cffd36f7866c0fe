#pragma once
// DSpark's drafter (DESIGN 5.4), reference in double: 3 transformer blocks over a 128-token
// sliding window of projected, normed target features; input = the last token + 4 noise tokens;
// one pass gives gamma = 5 rows of logits. A Markov head adds W2^T W1[x_{k-1}] (rank r) while
// tokens are chosen left to right, so the draft is a sequence; a confidence head gives
// c_k = sigmoid(w . [h_k ; W1[x_{k-1}]]) for the scheduler.
#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "core/dspark_config.hpp"

namespace tandem::reference {

// How the drafter chooses: greedy (argmax, lower index wins ties) or sampled from
// softmax(logits / temperature) rounded to float, with the uniform of Philox (seed, request,
// position of x_k, stream 2); verification uses streams 0 and 1 of the same keys.
struct DraftChoice {
  bool greedy = true;
  uint64_t seed = 0;
  uint32_t request = 0, position = 0;  // position: the sequence position of x_1
  double temperature = 1.0;
};

struct Draft {
  std::vector<int32_t> tokens;              // [K]
  Eigen::MatrixXd logits;                   // [K, V] including the Markov head
  std::vector<std::vector<float>> p_draft;  // [K][V] the distributions the tokens came from
  std::vector<double> confidence;           // [K] c_k
};

class DsparkDrafter {
 public:
  // feature_dim: width of a target feature row (3 x the backbone width).
  DsparkDrafter(const DsparkConfig& c, int64_t feature_dim, uint64_t seed);

  // The one pass: final hidden states h_k [gamma, width] and their logits [gamma, V] before
  // the Markov head. features: [T, feature_dim], one row per cached position (T may be 0).
  struct PassOutputs {
    Eigen::MatrixXd hidden, logits;
  };
  PassOutputs forward(const Eigen::MatrixXd& features, int32_t last) const;

  // The first K (<= gamma) drafted tokens after `last`.
  Draft propose(const Eigen::MatrixXd& features, int32_t last, int K,
                const DraftChoice& choice) const;

  const DsparkConfig& config() const { return c_; }

 private:
  struct Block {
    Eigen::MatrixXd wq, wk, wv, wo, mlp_in, mlp_out;
  };
  DsparkConfig c_;
  Eigen::MatrixXd project_;  // [feature_dim, width]
  Eigen::MatrixXd embed_;    // [V, width]
  Eigen::MatrixXd noise_;    // [gamma - 1, width] the noise tokens
  std::vector<Block> blocks_;
  Eigen::MatrixXd unembed_;     // [V, width]
  Eigen::MatrixXd markov_in_;   // W1 [V, r]
  Eigen::MatrixXd markov_out_;  // W2 [r, V]
  Eigen::VectorXd confidence_;  // w [width + r]
};

}  // namespace tandem::reference
