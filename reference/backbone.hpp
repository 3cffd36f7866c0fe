#pragma once
// A small deterministic causal backbone with a KV cache (append and rollback) behind the
// interface the end-to-end model will fill (DESIGN 5.4): embedding -> causal attention layers
// (single head, cached keys/values, residual) -> output projection to logits. Double precision:
// speculative and plain decoding must agree exactly, not to a tolerance.
#include <Eigen/Dense>
#include <cstdint>
#include <functional>
#include <vector>

#include "problem/dspark.hpp"

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

// Rollback keeps a prefix: `length` must be in [0, cached] (BadInput otherwise).
void check_rollback(int64_t length, int64_t cached);

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

// Greedy decoding without speculation: `steps` tokens after `prompt`, argmax of the logits.
std::vector<int32_t> greedy_decode(Backbone& model, const std::vector<int32_t>& prompt, int steps);
// The same over the float target distributions (what greedy verification reads: rounding to
// float may tie two logits apart, the lower index wins).
std::vector<int32_t> greedy_decode_float(Backbone& model, const std::vector<int32_t>& prompt,
                                         int steps);

// A drafter proposes up to K next tokens given the emitted text.
using Drafter = std::function<std::vector<int32_t>(const std::vector<int32_t>& text, int K)>;

struct SpeculativeStats {
  int passes = 0;                      // backbone verification passes
  std::vector<int> admitted_per_step;  // drafted tokens sent to verification in each pass
  std::vector<int> accepted_per_step;  // of those, accepted
  std::vector<int> emitted_per_step;   // tokens added to the text: accepted + 1, except when
                                       // the pass reaches the length limit
  void record(int admitted, int accepted, int emitted) {
    ++passes;
    admitted_per_step.push_back(admitted);
    accepted_per_step.push_back(accepted);
    emitted_per_step.push_back(emitted);
  }
};
// Greedy speculative decoding: each pass scores [last, x_1..x_K] in one append, accepts while
// x_k is the argmax, emits the argmax, and rolls the cache back to the emitted tokens. `budget`
// gives K for each pass (1..5); the text is cut at `steps` generated tokens.
std::vector<int32_t> speculative_greedy_decode(Backbone& model, const std::vector<int32_t>& prompt,
                                               int steps, const Drafter& drafter,
                                               const std::function<int(int pass)>& budget,
                                               SpeculativeStats* stats = nullptr);

// Sampling mode: a drafter's tokens with the distributions (float, [K][V]) they were drawn from
// and their confidences c_k for a scheduler ([K], or empty); given a budget it proposes
// 1..budget tokens (a scheduler may admit fewer).
struct Proposal {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> p_draft;
  std::vector<double> confidence;
};
using SamplingDrafter = std::function<Proposal(const std::vector<int32_t>& text, int K)>;
// A batch's verification (reference::dspark_verify or the kernel through run_dspark_verify).
using Verifier = std::function<VerifyOutputs(const VerifyInputs&)>;
struct Sampling {
  uint64_t seed = 0;  // draws keyed by (seed, request, position)
  double temperature = 1.0;
  bool greedy = false;  // verify by argmax of the (float) target distributions instead
};
// The backbone's distribution at a temperature, rounded to float (what verification reads).
std::vector<float> target_distribution(const Eigen::RowVectorXd& logits, double temperature);

// One request of a batch: its own backbone (cache) and drafter; its draws are keyed by its
// index in the batch, whichever verification slot it has.
struct BatchRequest {
  Backbone* model;
  std::vector<int32_t> prompt;  // not empty
  SamplingDrafter drafter;
};
// Per pass: how many of each proposal's tokens go to verification (a prefix, 0..proposed).
using Admission = std::function<std::vector<int>(const std::vector<Proposal>&)>;
// Every proposed token (verify-K with the budget K).
std::vector<int> admit_all(const std::vector<Proposal>& proposals);
// DSpark's scheduler over the proposals' confidences against a steps-per-second curve
// (reference::schedule; sps[n] for n tokens in the pass, at least R + 1 points).
Admission scheduler_admission(std::vector<double> sps);

struct BatchDecode {
  std::vector<std::vector<int32_t>> text;  // [R] prompt + steps tokens
  std::vector<SpeculativeStats> stats;     // [R] the passes each request took part in
  int passes = 0;                          // batched verification passes
};
// Called after every pass (the caches hold exactly the emitted tokens).
using PassObserver = std::function<void(int pass, const BatchDecode& so_far)>;
// Speculative decoding of a batch: every pass, each unfinished request's drafter proposes up to
// budget(pass) tokens, `admit` chooses a prefix of each, every backbone scores
// [last, x_1..x_{k_r}] in one append, one batched `verify` decides (draws keyed by (seed,
// request, position of x_1)), and each cache is rolled back to its emitted tokens. A request
// admitted 0 drafts decodes one token from p_t(last). Texts stop at `steps` generated tokens.
BatchDecode speculative_batch_decode(std::vector<BatchRequest>& requests, int steps,
                                     const std::function<int(int pass)>& budget,
                                     const Admission& admit, const Sampling& sampling,
                                     const Verifier& verify, const PassObserver& observe = {});
// One request, every proposed token verified (a batch of one with admit_all).
std::vector<int32_t> speculative_sample_decode(Backbone& model, const std::vector<int32_t>& prompt,
                                               int steps, const SamplingDrafter& drafter,
                                               const std::function<int(int pass)>& budget,
                                               const Sampling& sampling, const Verifier& verify,
                                               SpeculativeStats* stats = nullptr);

// The verifier under test (a kernel) must hand back what a decode loop can use: per request an
// accepted count in [0, k_r] and emitted tokens in [0, V). Anything else is its fault, thrown as
// a KernelFault naming the tensor (not bad input); the decode loops call it before any cache or
// byte model touches the result.
void check_verifier_outputs(const VerifyInputs& in, const VerifyOutputs& out);

}  // namespace tandem::reference
