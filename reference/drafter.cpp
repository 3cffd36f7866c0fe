#include "reference/drafter.hpp"

#include <cmath>

#include "core/philox.hpp"
#include "reference/dspark.hpp"
#include "reference/model_util.hpp"

namespace tandem::reference {

DsparkDrafter::DsparkDrafter(const DsparkConfig& c, int64_t feature_dim, uint64_t seed)
    : c_(c),
      project_(seeded_matrix(feature_dim, c.width, seed, 1, 1.0 / std::sqrt(double(feature_dim)))),
      embed_(seeded_matrix(c.vocab, c.width, seed, 2, 1.0)),
      noise_(seeded_matrix(c.gamma - 1, c.width, seed, 3, 1.0)),
      unembed_(seeded_matrix(c.vocab, c.width, seed, 4, 1.0)),
      markov_in_(seeded_matrix(c.vocab, c.markov_rank, seed, 5, 1.0)),
      markov_out_(seeded_matrix(c.markov_rank, c.vocab, seed, 6, 1.0 / std::sqrt(c.markov_rank))),
      confidence_(seeded_matrix(c.width + c.markov_rank, 1, seed, 7, 1.0)) {
  const double s = 1.0 / std::sqrt(double(c.width));
  for (int b = 0; b < c.blocks; ++b) {
    const uint32_t id = 16 + 8 * uint32_t(b);
    blocks_.push_back({seeded_matrix(c.width, c.width, seed, id, s),
                       seeded_matrix(c.width, c.width, seed, id + 1, s),
                       seeded_matrix(c.width, c.width, seed, id + 2, s),
                       seeded_matrix(c.width, c.width, seed, id + 3, s),
                       seeded_matrix(c.width, 2 * c.width, seed, id + 4, s),
                       seeded_matrix(2 * c.width, c.width, seed, id + 5, s / std::sqrt(2.0))});
  }
}

DsparkDrafter::PassOutputs DsparkDrafter::forward(const Eigen::MatrixXd& features,
                                                  int32_t last) const {
  const int64_t W = std::min<int64_t>(features.rows(), c_.window), g = c_.gamma;
  // Only the newest `window` positions are read: older features cannot change the draft.
  const Eigen::MatrixXd context = rms_norm_rows(features.bottomRows(W) * project_);  // [W, width]
  Eigen::MatrixXd h(g, c_.width);                                                    // [g, width]
  h.row(0) = embed_.row(last);
  h.bottomRows(g - 1) = noise_;
  for (const Block& b : blocks_) {
    const Eigen::MatrixXd a = rms_norm_rows(h);
    Eigen::MatrixXd kv_in(W + g, c_.width);  // the window, then the drafted positions
    kv_in << context, a;
    const Eigen::MatrixXd q = a * b.wq, k = kv_in * b.wk, v = kv_in * b.wv;
    Eigen::MatrixXd attended(g, c_.width);
    for (int64_t i = 0; i < g; ++i) {  // position i sees the whole window and positions <= i
      const Eigen::RowVectorXd scores =
          q.row(i) * k.topRows(W + i + 1).transpose() / std::sqrt(double(c_.width));
      attended.row(i) = softmax(scores, 1.0) * v.topRows(W + i + 1);
    }
    h += attended * b.wo;
    h += (rms_norm_rows(h) * b.mlp_in).array().tanh().matrix() * b.mlp_out;
  }
  PassOutputs out;
  out.hidden = rms_norm_rows(h);
  out.logits = out.hidden * unembed_.transpose();
  return out;
}

Draft DsparkDrafter::propose(const Eigen::MatrixXd& features, int32_t last, int K,
                             const DraftChoice& choice) const {
  const PassOutputs pass = forward(features, last);
  Draft d;
  d.logits.resize(K, c_.vocab);
  int32_t previous = last;
  for (int k = 0; k < K; ++k) {
    const Eigen::RowVectorXd w1 = markov_in_.row(previous);  // W1[x_{k-1}]  [r]
    d.logits.row(k) = pass.logits.row(k) + w1 * markov_out_;
    Eigen::RowVectorXd joined(c_.width + c_.markov_rank);
    joined << pass.hidden.row(k), w1;
    d.confidence.push_back(1.0 / (1.0 + std::exp(-joined.dot(confidence_))));
    const Eigen::RowVectorXd p = softmax(d.logits.row(k), choice.greedy ? 1.0 : choice.temperature);
    d.p_draft.emplace_back(p.data(), p.data() + p.size());
    if (choice.greedy) {
      Eigen::Index best;
      d.logits.row(k).maxCoeff(&best);  // the first maximum: lower index wins ties
      previous = static_cast<int32_t>(best);
    } else {
      const float u = philox_uniform(
          philox_draw(choice.seed, choice.request, choice.position + uint32_t(k), 2).v[0]);
      previous = inverse_cdf(d.p_draft.back(), u);
    }
    d.tokens.push_back(previous);
  }
  return d;
}

}  // namespace tandem::reference
