#include "reference/backbone.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "reference/dspark.hpp"
#include "reference/model_util.hpp"

namespace tandem::reference {
namespace {

int32_t argmax_row(const Eigen::MatrixXd& logits, int64_t row) {
  Eigen::Index best;
  logits.row(row).maxCoeff(&best);  // the first maximum: lower index wins ties
  return static_cast<int32_t>(best);
}

// One verification pass: the tokens it emits (accepted drafts, then one more).
struct Pass {
  std::vector<int32_t> emitted;
  int admitted = 0, accepted = 0;
};

// The loop both decoding modes share: the prompt minus its last token is cached; every pass
// appends [last, x_1..x_K] (inside `pass`), emits, and rolls the cache back so it holds exactly
// the emitted tokens (all but the newest, which the next pass feeds).
template <class PassFn>
std::vector<int32_t> speculative_decode(Backbone& model, const std::vector<int32_t>& prompt,
                                        int steps, const std::function<int(int pass)>& budget,
                                        SpeculativeStats* stats, const PassFn& pass_fn) {
  std::vector<int32_t> text = prompt;
  model.append(std::vector<int32_t>(prompt.begin(), prompt.end() - 1));
  const size_t goal = prompt.size() + steps;
  for (int pass = 0; text.size() < goal; ++pass) {
    const int64_t before = model.cached();
    const Pass p = pass_fn(text, budget(pass));
    const size_t length = text.size();
    for (size_t j = 0; j < p.emitted.size() && text.size() < goal; ++j)
      text.push_back(p.emitted[j]);
    model.rollback(std::min<int64_t>(before + 1 + p.accepted, int64_t(text.size()) - 1));
    if (stats) stats->record(p.admitted, p.accepted, int(text.size() - length));
  }
  return text;
}

std::vector<int32_t> scored_tokens(const std::vector<int32_t>& text,
                                   const std::vector<int32_t>& draft) {
  std::vector<int32_t> scored{text.back()};
  scored.insert(scored.end(), draft.begin(), draft.end());
  return scored;
}

}  // namespace

TinyBackbone::TinyBackbone(int64_t vocab, int64_t d, uint64_t seed, int layers)
    : vocab_(vocab),
      d_(d),
      embed_(seeded_matrix(vocab, d, seed, 1, 1.0)),
      unembed_(seeded_matrix(vocab, d, seed, 2, 1.0)) {
  const double s = 1.0 / std::sqrt(double(d));
  for (int l = 0; l < layers; ++l) {
    const uint32_t id = 16 + 4 * uint32_t(l);
    layers_.push_back({seeded_matrix(d, d, seed, id, s),
                       seeded_matrix(d, d, seed, id + 1, s),
                       seeded_matrix(d, d, seed, id + 2, s),
                       seeded_matrix(d, d, seed, id + 3, s),
                       {},
                       {}});
  }
}

void check_rollback(int64_t length, int64_t cached) {
  if (length < 0 || length > cached)
    throw_bad_input("backbone rollback: length {} outside [0, {}] (the cached positions)", length,
                    cached);
}

Eigen::MatrixXd TinyBackbone::append(const std::vector<int32_t>& tokens) {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab_)
      throw_bad_input("backbone: token {} is {}, outside [0, {})", i, tokens[i], vocab_);
  Eigen::MatrixXd logits(tokens.size(), vocab_);
  const size_t L = layers_.size();
  for (size_t i = 0; i < tokens.size(); ++i) {
    Eigen::VectorXd h = embed_.row(tokens[i]).transpose();
    Eigen::VectorXd feature(3 * d_);
    for (size_t l = 0; l < L; ++l) {
      Layer& layer = layers_[l];
      if (l + 3 >= L) feature.segment(int64_t(l + 3 - L) * d_, d_) = h;  // attention input
      layer.keys.push_back(layer.wk * h);
      layer.values.push_back(layer.wv * h);
      h += layer.wo * attend<Eigen::VectorXd>(layer.wq * h, layer.keys, layer.values, 1);
    }
    features_.push_back(feature);
    logits.row(i) = (unembed_ * h).transpose();
  }
  return logits;
}

void TinyBackbone::rollback(int64_t length) {
  check_rollback(length, cached());
  for (Layer& layer : layers_) layer.keys.resize(length), layer.values.resize(length);
  features_.resize(length);
}

Eigen::MatrixXd TinyBackbone::cache_snapshot() const {
  Eigen::MatrixXd m(cached(), 2 * d_ * int64_t(layers_.size()));
  for (int64_t j = 0; j < cached(); ++j)
    for (size_t l = 0; l < layers_.size(); ++l)
      m.row(j).segment(2 * d_ * int64_t(l), 2 * d_) << layers_[l].keys[j].transpose(),
          layers_[l].values[j].transpose();
  return m;
}

Eigen::MatrixXd TinyBackbone::target_features() const {
  Eigen::MatrixXd m(cached(), 3 * d_);
  for (int64_t j = 0; j < cached(); ++j) m.row(j) = features_[j].transpose();
  return m;
}

namespace {

// Plain decoding: `choose` picks the next token from the newest row of logits.
template <class Choose>
std::vector<int32_t> plain_decode(Backbone& model, const std::vector<int32_t>& prompt, int steps,
                                  const Choose& choose) {
  std::vector<int32_t> text = prompt;
  Eigen::MatrixXd logits = model.append(prompt);
  for (int s = 0; s < steps; ++s) {
    text.push_back(choose(logits.bottomRows(1)));
    if (s + 1 < steps) logits = model.append({text.back()});
  }
  return text;
}

}  // namespace

std::vector<int32_t> greedy_decode(Backbone& model, const std::vector<int32_t>& prompt, int steps) {
  return plain_decode(model, prompt, steps,
                      [](const Eigen::MatrixXd& last) { return argmax_row(last, 0); });
}

std::vector<int32_t> greedy_decode_float(Backbone& model, const std::vector<int32_t>& prompt,
                                         int steps) {
  return plain_decode(model, prompt, steps, [](const Eigen::MatrixXd& last) {
    return argmax(target_distribution(last.row(0), 1.0));
  });
}

std::vector<int32_t> speculative_greedy_decode(Backbone& model, const std::vector<int32_t>& prompt,
                                               int steps, const Drafter& drafter,
                                               const std::function<int(int pass)>& budget,
                                               SpeculativeStats* stats) {
  return speculative_decode(
      model, prompt, steps, budget, stats, [&](const std::vector<int32_t>& text, int K) {
        const std::vector<int32_t> draft = drafter(text, K);
        const Eigen::MatrixXd logits = model.append(scored_tokens(text, draft));
        Pass p;
        p.admitted = int(draft.size());
        while (size_t(p.accepted) < draft.size() &&
               draft[p.accepted] == argmax_row(logits, p.accepted))
          p.emitted.push_back(draft[p.accepted++]);
        p.emitted.push_back(argmax_row(logits, p.accepted));
        return p;
      });
}

std::vector<float> target_distribution(const Eigen::RowVectorXd& logits, double temperature) {
  const Eigen::RowVectorXd p = softmax(logits, temperature);
  return std::vector<float>(p.data(), p.data() + p.size());
}

std::vector<int> admit_all(const std::vector<Proposal>& proposals) {
  std::vector<int> counts;
  for (const Proposal& p : proposals) counts.push_back(int(p.tokens.size()));
  return counts;
}

Admission scheduler_admission(std::vector<double> sps) {
  return [sps = std::move(sps)](const std::vector<Proposal>& proposals) {
    if (sps.size() <= proposals.size())
      throw_bad_input(
          "dspark scheduler: the steps-per-second curve has {} points, a batch of {} "
          "needs at least {}",
          sps.size(), proposals.size(), proposals.size() + 1);
    std::vector<std::vector<double>> confidence;
    for (const Proposal& p : proposals) {
      if (p.confidence.size() != p.tokens.size())
        throw_bad_input("dspark scheduler: a proposal of {} tokens has {} confidences",
                        p.tokens.size(), p.confidence.size());
      confidence.push_back(p.confidence);
    }
    return schedule(confidence, sps).admitted;
  };
}

namespace {

// The verification inputs of one pass: request i drafts counts[i] tokens; rows after them stay
// zero (padding the kernel never reads).
VerifyInputs batch_inputs(int64_t R, int64_t V, const std::vector<int>& counts,
                          const Sampling& sampling) {
  VerifyInputs in;
  in.requests = R, in.vocab = V, in.seed = sampling.seed, in.greedy = sampling.greedy;
  in.budget = std::max(1, *std::max_element(counts.begin(), counts.end()));
  in.drafted.assign(counts.begin(), counts.end());
  in.draft = Tensor<int32_t>({R, in.budget}, 0);
  in.p_draft = Tensor<float>({R, in.budget, V}, 0.0f);
  in.p_target = Tensor<float>({R, in.budget + 1, V}, 0.0f);
  return in;
}

void check_proposal(const Proposal& p, int budget, int64_t V) {
  const size_t K = p.tokens.size();
  if (K < 1 || K > size_t(budget) || p.p_draft.size() != K)
    throw_bad_input(
        "speculative decoding: the drafter proposed {} tokens ({} distributions) for a budget "
        "of {}",
        K, p.p_draft.size(), budget);
  for (int32_t t : p.tokens)
    if (t < 0 || t >= V)
      throw_bad_input("speculative decoding: the drafter proposed token {}, outside [0, {})", t, V);
  for (const auto& d : p.p_draft)
    if (d.size() != size_t(V))
      throw_bad_input("speculative decoding: a draft distribution has {} entries, vocab {}",
                      d.size(), V);
}

}  // namespace

BatchDecode speculative_batch_decode(std::vector<BatchRequest>& requests, int steps,
                                     const std::function<int(int pass)>& budget,
                                     const Admission& admit, const Sampling& sampling,
                                     const Verifier& verify, const PassObserver& observe) {
  const int64_t V = requests.empty() ? 0 : requests.front().model->vocab();
  BatchDecode d;
  for (BatchRequest& q : requests) {
    if (q.prompt.empty() || q.model->vocab() != V)
      throw_bad_input("speculative decoding: every request needs a prompt and vocab {}", V);
    d.text.push_back(q.prompt);
    q.model->append(std::vector<int32_t>(q.prompt.begin(), q.prompt.end() - 1));
  }
  d.stats.resize(requests.size());
  auto finished = [&](size_t r) { return d.text[r].size() >= requests[r].prompt.size() + steps; };
  for (int pass = 0;; ++pass) {
    std::vector<size_t> active;  // batch slot i verifies request active[i]
    for (size_t r = 0; r < requests.size(); ++r)
      if (!finished(r)) active.push_back(r);
    if (active.empty()) break;
    const int K = budget(pass);
    std::vector<Proposal> proposals;
    for (size_t r : active) {
      proposals.push_back(requests[r].drafter(d.text[r], K));
      check_proposal(proposals.back(), K, V);
    }
    const std::vector<int> counts = admit(proposals);
    if (counts.size() != active.size())
      throw_bad_input("speculative decoding: admission gave {} counts for {} requests",
                      counts.size(), active.size());
    for (size_t i = 0; i < active.size(); ++i)
      if (counts[i] < 0 || size_t(counts[i]) > proposals[i].tokens.size())
        throw_bad_input("speculative decoding: admitted {} of {} proposed tokens", counts[i],
                        proposals[i].tokens.size());
    VerifyInputs in = batch_inputs(int64_t(active.size()), V, counts, sampling);
    std::vector<int64_t> before;
    for (size_t i = 0; i < active.size(); ++i) {
      const size_t r = active[i];
      const int k_r = counts[i], B = in.budget;
      const std::vector<int32_t> draft(proposals[i].tokens.begin(),
                                       proposals[i].tokens.begin() + k_r);
      before.push_back(requests[r].model->cached());
      const Eigen::MatrixXd logits = requests[r].model->append(scored_tokens(d.text[r], draft));
      std::copy(draft.begin(), draft.end(), in.draft.ptr() + i * B);
      for (int k = 0; k < k_r; ++k)
        std::copy(proposals[i].p_draft[k].begin(), proposals[i].p_draft[k].end(),
                  in.p_draft.ptr() + (i * B + k) * V);
      for (int k = 0; k <= k_r; ++k) {
        const auto p = target_distribution(logits.row(k), sampling.temperature);
        std::copy(p.begin(), p.end(), in.p_target.ptr() + (i * (B + 1) + k) * V);
      }
      in.position.push_back(uint32_t(d.text[r].size()));
      in.request.push_back(uint32_t(r));
    }
    const VerifyOutputs out = verify(in);
    check_verifier_outputs(in, out);
    for (size_t i = 0; i < active.size(); ++i) {
      const size_t r = active[i];
      std::vector<int32_t>& text = d.text[r];
      const size_t length = text.size(), goal = requests[r].prompt.size() + steps;
      const int accepted = out.accepted[i];
      for (int j = 0; j <= accepted && text.size() < goal; ++j)
        text.push_back(out.emitted.data[i * (in.budget + 1) + j]);
      requests[r].model->rollback(
          std::min<int64_t>(before[i] + 1 + accepted, int64_t(text.size()) - 1));
      d.stats[r].record(counts[i], accepted, int(text.size() - length));
    }
    ++d.passes;
    if (observe) observe(pass, d);
  }
  return d;
}

std::vector<int32_t> speculative_sample_decode(Backbone& model, const std::vector<int32_t>& prompt,
                                               int steps, const SamplingDrafter& drafter,
                                               const std::function<int(int pass)>& budget,
                                               const Sampling& sampling, const Verifier& verify,
                                               SpeculativeStats* stats) {
  std::vector<BatchRequest> one{{&model, prompt, drafter}};
  BatchDecode d = speculative_batch_decode(one, steps, budget, admit_all, sampling, verify);
  if (stats) *stats = d.stats[0];
  return d.text[0];
}

void check_verifier_outputs(const VerifyInputs& in, const VerifyOutputs& out) {
  const size_t R = size_t(in.requests);
  if (out.accepted.size() != R || out.emitted.data.size() != R * size_t(in.budget + 1))
    throw KernelFault("accepted",
                      fmt::format("verifier returned {} accepted counts and {} emitted "
                                  "tokens for {} requests of budget {}",
                                  out.accepted.size(), out.emitted.data.size(), R, in.budget));
  for (size_t i = 0; i < R; ++i) {
    const int a = out.accepted[i], k = in.drafted.empty() ? in.budget : in.drafted[i];
    if (a < 0 || a > k)
      throw KernelFault("accepted",
                        fmt::format("verifier: accepted[{}] = {}, outside [0, {}]", i, a, k));
    for (int j = 0; j <= a; ++j) {
      const int32_t t = out.emitted.data[i * (in.budget + 1) + j];
      if (t < 0 || t >= in.vocab)
        throw KernelFault("emitted", fmt::format("verifier: emitted[{}, {}] = {}, outside [0, {})",
                                                 i, j, t, in.vocab));
    }
  }
}

}  // namespace tandem::reference
