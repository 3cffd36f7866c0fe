#pragma once
// A small deterministic causal backbone with a KV cache (append and rollback) behind the
// interface the end-to-end model will fill (DESIGN 5.4): embedding -> one causal attention layer
// (single head, cached keys/values) with a residual -> output projection to logits. Double
// precision: speculative and plain decoding must agree exactly, not to a tolerance.
#include <Eigen/Dense>

#include <cstdint>
#include <functional>
#include <vector>

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
};

class TinyBackbone : public Backbone {
 public:
  TinyBackbone(int64_t vocab, int64_t d, uint64_t seed);
  int64_t vocab() const override { return vocab_; }
  Eigen::MatrixXd append(const std::vector<int32_t>& tokens) override;
  void rollback(int64_t length) override;
  int64_t cached() const override { return static_cast<int64_t>(keys_.size()); }
  Eigen::MatrixXd cache_snapshot() const override;

 private:
  int64_t vocab_, d_;
  Eigen::MatrixXd embed_, wq_, wk_, wv_, wo_, unembed_;
  std::vector<Eigen::VectorXd> keys_, values_;
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

}  // namespace tandem::reference
