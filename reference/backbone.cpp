#include "reference/backbone.hpp"

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
  int accepted = 0;
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
    for (size_t j = 0; j < p.emitted.size() && text.size() < goal; ++j)
      text.push_back(p.emitted[j]);
    model.rollback(std::min<int64_t>(before + 1 + p.accepted, int64_t(text.size()) - 1));
    if (stats) ++stats->passes, stats->accepted_per_step.push_back(p.accepted);
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

Eigen::MatrixXd TinyBackbone::append(const std::vector<int32_t>& tokens) {
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

std::vector<int32_t> greedy_decode(Backbone& model, const std::vector<int32_t>& prompt, int steps) {
  std::vector<int32_t> text = prompt;
  Eigen::MatrixXd logits = model.append(prompt);
  for (int s = 0; s < steps; ++s) {
    text.push_back(argmax_row(logits, logits.rows() - 1));
    if (s + 1 < steps) logits = model.append({text.back()});
  }
  return text;
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

std::vector<int32_t> speculative_sample_decode(Backbone& model, const std::vector<int32_t>& prompt,
                                               int steps, const SamplingDrafter& drafter,
                                               const std::function<int(int pass)>& budget,
                                               const Sampling& sampling, const Verifier& verify,
                                               SpeculativeStats* stats) {
  const int64_t V = model.vocab();
  return speculative_decode(
      model, prompt, steps, budget, stats, [&](const std::vector<int32_t>& text, int budget_k) {
        const Proposal draft = drafter(text, budget_k);
        const int K = static_cast<int>(draft.tokens.size());  // the drafter may propose fewer
        if (K < 1 || K > budget_k || draft.p_draft.size() != size_t(K))
          throw_bad_input(
              "speculative decoding: the drafter proposed {} tokens ({} "
              "distributions) for a budget of {}",
              K, draft.p_draft.size(), budget_k);
        const Eigen::MatrixXd logits = model.append(scored_tokens(text, draft.tokens));
        VerifyInputs in;
        in.requests = 1, in.vocab = V, in.budget = K, in.seed = sampling.seed;
        in.greedy = sampling.greedy;
        in.draft = Tensor<int32_t>({1, K}, draft.tokens);
        in.p_draft = Tensor<float>({1, K, V});
        in.p_target = Tensor<float>({1, K + 1, V});
        for (int k = 0; k < K; ++k)
          std::copy(draft.p_draft[k].begin(), draft.p_draft[k].end(), in.p_draft.ptr() + k * V);
        for (int k = 0; k <= K; ++k) {
          const auto p = target_distribution(logits.row(k), sampling.temperature);
          std::copy(p.begin(), p.end(), in.p_target.ptr() + k * V);
        }
        in.position = {uint32_t(text.size())};
        const VerifyOutputs out = verify(in);
        Pass p;
        p.accepted = out.accepted[0];
        p.emitted.assign(out.emitted.ptr(), out.emitted.ptr() + p.accepted + 1);
        return p;
      });
}

}  // namespace tandem::reference
