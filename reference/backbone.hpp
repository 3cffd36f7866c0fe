#pragma once
// A small deterministic causal backbone with a KV cache (append and rollback) behind the
// interface the end-to-end model will fill (DESIGN 5.4): embedding -> causal attention layers
// (single head, cached keys/values, residual) -> output projection to logits. Double precision:
// speculative and plain decoding must agree exactly, not to a tolerance.
#include <Eigen/Dense>
#include <cstdint>
#include <functional>
#include <vector>

#include "optimized/dspark.hpp"

namespace tandem::reference {

class Backbone {
 public:
  virtual ~Backbone() = default;
  virtual int64_t vocab() const = 0;
  // Appends `tokens` to the cache and returns their next-token logits, one row each.
  virtual Eigen::MatrixXd append(const std::vector<int32_t>& tokens) = 0;
  // Keeps only the first `length` cached positions.
  virtual void rollback(int64_t length) = 0;
  virtual int64_t cached() const = 0;
  // The cache's keys and values, one row per position (for comparisons).
  virtual Eigen::MatrixXd cache_snapshot() const = 0;
  // DSpark's target features of every cached position: the attention inputs of the last three
  // layers (each the mean over the residual streams), concatenated. [cached, 3 * width]
  virtual Eigen::MatrixXd target_features() const = 0;
};

class TinyBackbone : public Backbone {
 public:
  // layers >= 3 (the target features read the last three).
  TinyBackbone(int64_t vocab, int64_t d, uint64_t seed, int layers = 3);
  int64_t vocab() const override { return vocab_; }
  Eigen::MatrixXd append(const std::vector<int32_t>& tokens) override;
  void rollback(int64_t length) override;
  int64_t cached() const override { return static_cast<int64_t>(features_.size()); }
  Eigen::MatrixXd cache_snapshot() const override;
  Eigen::MatrixXd target_features() const override;

 private:
  struct Layer {
    Eigen::MatrixXd wq, wk, wv, wo;
    std::vector<Eigen::VectorXd> keys, values;
  };
  int64_t vocab_, d_;
  Eigen::MatrixXd embed_, unembed_;
  std::vector<Layer> layers_;
  std::vector<Eigen::VectorXd> features_;
};

// Greedy decoding without speculation: `steps` tokens after `prompt`.
std::vector<int32_t> greedy_decode(Backbone& model, const std::vector<int32_t>& prompt, int steps);

// A drafter proposes up to K next tokens given the emitted text.
using Drafter = std::function<std::vector<int32_t>(const std::vector<int32_t>& text, int K)>;

struct SpeculativeStats {
  int passes = 0;                      // backbone verification passes
  std::vector<int> accepted_per_step;  // drafted tokens accepted in each pass
};
// Greedy speculative decoding: each pass scores [last, x_1..x_K] in one append, accepts while
// x_k is the argmax, emits the argmax, and rolls the cache back to the emitted tokens. `budget`
// gives K for each pass (1..5); the text is cut at `steps` generated tokens.
std::vector<int32_t> speculative_greedy_decode(Backbone& model, const std::vector<int32_t>& prompt,
                                               int steps, const Drafter& drafter,
                                               const std::function<int(int pass)>& budget,
                                               SpeculativeStats* stats = nullptr);

// Sampling mode: a drafter's tokens with the distributions (float, [K][V]) they were drawn from;
// given a budget it proposes 1..budget tokens (a scheduler may admit fewer).
struct Proposal {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> p_draft;
};
using SamplingDrafter = std::function<Proposal(const std::vector<int32_t>& text, int K)>;
// One request's verification (reference::dspark_verify or the kernel through run_dspark_verify).
using Verifier = std::function<VerifyOutputs(const VerifyInputs&)>;
struct Sampling {
  uint64_t seed = 0;  // draws keyed by (seed, request 0, position): one request decodes here
  double temperature = 1.0;
  bool greedy = false;  // verify by argmax of the (float) target distributions instead
};
// The backbone's distribution at a temperature, rounded to float (what verification reads).
std::vector<float> target_distribution(const Eigen::RowVectorXd& logits, double temperature);
// Speculative sampling: each pass scores [last, x_1..x_K] in one append; `verify` decides
// (rejection sampling, residual resample, bonus) with draws keyed by (seed, 0, position of
// x_1); the cache is rolled back to the emitted tokens.
std::vector<int32_t> speculative_sample_decode(Backbone& model, const std::vector<int32_t>& prompt,
                                               int steps, const SamplingDrafter& drafter,
                                               const std::function<int(int pass)>& budget,
                                               const Sampling& sampling, const Verifier& verify,
                                               SpeculativeStats* stats = nullptr);

}  // namespace tandem::reference
