#include "reference/backbone.hpp"

#include <cmath>

#include "core/philox.hpp"

namespace tandem::reference {
namespace {

Eigen::MatrixXd seeded(int64_t rows, int64_t cols, uint64_t seed, uint32_t id, double scale) {
  Eigen::MatrixXd m(rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    m.data()[i] = scale * (2.0 * philox_uniform(philox_draw(seed, id, uint32_t(i)).v[0]) - 1.0);
  return m;
}

int32_t argmax_row(const Eigen::MatrixXd& logits, int64_t row) {
  Eigen::Index best;
  logits.row(row).maxCoeff(&best);  // the first maximum: lower index wins ties
  return static_cast<int32_t>(best);
}

}  // namespace

TinyBackbone::TinyBackbone(int64_t vocab, int64_t d, uint64_t seed)
    : vocab_(vocab),
      d_(d),
      embed_(seeded(vocab, d, seed, 1, 1.0)),
      wq_(seeded(d, d, seed, 2, 1.0 / std::sqrt(double(d)))),
      wk_(seeded(d, d, seed, 3, 1.0 / std::sqrt(double(d)))),
      wv_(seeded(d, d, seed, 4, 1.0 / std::sqrt(double(d)))),
      wo_(seeded(d, d, seed, 5, 1.0 / std::sqrt(double(d)))),
      unembed_(seeded(vocab, d, seed, 6, 1.0)) {}

Eigen::MatrixXd TinyBackbone::append(const std::vector<int32_t>& tokens) {
  Eigen::MatrixXd logits(tokens.size(), vocab_);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Eigen::VectorXd x = embed_.row(tokens[i]).transpose();
    keys_.push_back(wk_ * x);
    values_.push_back(wv_ * x);
    const Eigen::VectorXd q = wq_ * x;
    // Causal attention over every cached position up to and including this one.
    Eigen::VectorXd scores(keys_.size());
    for (size_t j = 0; j < keys_.size(); ++j) scores(j) = q.dot(keys_[j]) / std::sqrt(double(d_));
    const Eigen::VectorXd p = (scores.array() - scores.maxCoeff()).exp();
    Eigen::VectorXd attended = Eigen::VectorXd::Zero(d_);
    for (size_t j = 0; j < keys_.size(); ++j) attended += p(j) / p.sum() * values_[j];
    const Eigen::VectorXd h = x + wo_ * attended;
    logits.row(i) = (unembed_ * h).transpose();
  }
  return logits;
}

void TinyBackbone::rollback(int64_t length) {
  keys_.resize(length);
  values_.resize(length);
}

Eigen::MatrixXd TinyBackbone::cache_snapshot() const {
  Eigen::MatrixXd m(keys_.size(), 2 * d_);
  for (size_t j = 0; j < keys_.size(); ++j)
    m.row(j) << keys_[j].transpose(), values_[j].transpose();
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
  std::vector<int32_t> text = prompt;
  // The prompt minus its last token is cached; every pass scores [last, x_1..x_K].
  model.append(std::vector<int32_t>(prompt.begin(), prompt.end() - 1));
  const size_t goal = prompt.size() + steps;
  for (int pass = 0; text.size() < goal; ++pass) {
    const std::vector<int32_t> draft = drafter(text, budget(pass));
    std::vector<int32_t> scored{text.back()};
    scored.insert(scored.end(), draft.begin(), draft.end());
    const int64_t before = model.cached();
    const Eigen::MatrixXd logits = model.append(scored);
    size_t k = 0;
    while (k < draft.size() && draft[k] == argmax_row(logits, int64_t(k))) ++k;
    for (size_t j = 0; j < k && text.size() < goal; ++j) text.push_back(draft[j]);
    if (text.size() < goal) text.push_back(argmax_row(logits, int64_t(k)));
    // The cache keeps exactly the emitted tokens (all but the newest, which the next pass feeds).
    model.rollback(std::min<int64_t>(before + 1 + int64_t(k), int64_t(text.size()) - 1));
    if (stats) ++stats->passes, stats->accepted_per_step.push_back(int(k));
  }
  return text;
}

}  // namespace tandem::reference
