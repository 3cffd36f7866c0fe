#pragma once
// What the reference's small models share (the DSpark backbone and drafter, the end-to-end
// model): seeded weights, softmax, causal attention over a KV cache (the small backbone's), the
// mHC blocks' activations and taps.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/philox.hpp"
#include "core/seeded_matrix.hpp"
#include "core/tensor.hpp"
#include "core/vision_config.hpp"  // moe_materialises_every_expert
#include "problem/model.hpp"       // Projection
#include "reference/moe.hpp"       // swiglu
#include "reference/residual.hpp"

namespace tandem::reference {

// A float weight tensor of seeded weights (core/seeded_matrix.hpp; value i: index i row-major).
inline Tensor<float> seeded_floats(Shape s, uint64_t seed, uint32_t id, double lo, double hi) {
  Tensor<float> t(std::move(s));
  seeded_weights(seed, id, 0, t.size(), lo, hi, t.ptr());
  return t;
}
// Rows [first, first + count) of a seeded matrix in scalar S.
template <class S>
Mat<S> seeded_rows(const SeededMatrix& w, int64_t first, int64_t count) {
  Mat<S> m(count, w.cols);
  w.rows_into(first, count, m.data());
  return m;
}
// A projection's weights in scalar S (a seeded one generated here).
template <class S>
Mat<S> projection_matrix(const Projection& p) {
  const auto* s = std::get_if<SeededMatrix>(&p.w);
  return s ? seeded_rows<S>(*s, 0, s->rows) : as_matrix<S>(std::get<Tensor<float>>(p.w));
}

// The logits [n, V] of the rows y through an unembedding [V, d], its rows generated (when seeded)
// and multiplied kUnembedChunkRows at a time: a release's [V, d] is never held whole.
template <class S>
Eigen::MatrixXd unembed_logits(const Projection& w, const std::vector<Vec<S>>& y) {
  const int64_t V = w.shape()[0], n = int64_t(y.size());
  Eigen::MatrixXd logits(n, V);
  for (int64_t first = 0; first < V; first += kUnembedChunkRows) {
    const int64_t rows = std::min(kUnembedChunkRows, V - first);
    const auto* seeded = std::get_if<SeededMatrix>(&w.w);
    const Mat<S> m =
        seeded ? seeded_rows<S>(*seeded, first, rows) : as_matrix<S>(w.row_block(first, rows));
    for (int64_t t = 0; t < n; ++t)
      logits.row(t).segment(first, rows) =
          naive_matvec<S>(m, y[size_t(t)]).transpose().template cast<double>();
  }
  return logits;
}

// An attention's query and output LoRAs (core/attention_lora.hpp) for `heads` heads of 512 at
// width d: `make(rows, cols, lo, hi)` draws each Projection in turn (wq_a, the latent's norm gain
// as a column in [0.75, 1.25), wq_b, wo_a, wo_b), the matrices uniform in +-1 / sqrt(fan-in).
template <class Make>
ModelWeights::Attention lora_weights(int64_t heads, int64_t d, const AttentionLora& l,
                                     Make&& make) {
  const int64_t D = 512, Rq = l.q_rank, G = l.o_groups, Ro = l.o_rank;
  const auto draw = [&](int64_t rows, int64_t cols) {
    const double s = 1 / std::sqrt(double(cols));
    return make(rows, cols, -s, s);
  };
  ModelWeights::Attention a;
  a.wq_a = draw(Rq, d);
  a.q_norm = make(Rq, int64_t{1}, 0.75, 1.25).values();
  a.q_norm.shape = {Rq};
  a.wq_b = draw(heads * D, Rq);
  a.wo_a = draw(G * Ro, heads / G * D);
  a.wo_b = draw(d, G * Ro);
  return a;
}

// Uniform in [-scale, scale), Philox keyed by (seed, id, index): every run and platform builds
// the same model.
inline Eigen::MatrixXd seeded_matrix(int64_t rows, int64_t cols, uint64_t seed, uint32_t id,
                                     double scale) {
  Eigen::MatrixXd m(rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    m.data()[i] = scale * (2.0 * philox_uniform(philox_draw(seed, id, uint32_t(i)).v[0]) - 1.0);
  return m;
}

// Bit-identical, shapes included (Eigen's == assumes equal shapes and reads past the smaller).
inline bool identical(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() && a == b;
}

// Softmax of a row of logits at a temperature, in double.
inline Eigen::RowVectorXd softmax(const Eigen::RowVectorXd& logits, double temperature) {
  const Eigen::RowVectorXd e = ((logits.array() - logits.maxCoeff()) / temperature).exp();
  return e / e.sum();
}

// One query's causal attention over the cached keys and values (every position up to and
// including its own), `heads` heads of width q.size() / heads side by side, in q's scalar.
template <class Vector>
Vector attend(const Vector& q, const std::vector<Vector>& keys, const std::vector<Vector>& values,
              int64_t heads) {
  using S = typename Vector::Scalar;
  const int64_t hd = q.size() / heads;
  Vector out = Vector::Zero(q.size());
  for (int64_t h = 0; h < heads; ++h) {
    Eigen::Matrix<S, Eigen::Dynamic, 1> scores(keys.size());
    for (size_t j = 0; j < keys.size(); ++j)
      scores(j) = q.segment(h * hd, hd).dot(keys[j].segment(h * hd, hd)) / std::sqrt(S(hd));
    const Eigen::Matrix<S, Eigen::Dynamic, 1> p = (scores.array() - scores.maxCoeff()).exp();
    for (size_t j = 0; j < keys.size(); ++j)
      out.segment(h * hd, hd) += p(j) / p.sum() * values[j].segment(h * hd, hd);
  }
  return out;
}

// [n] rows of width w -> a tap tensor [n, w].
template <class S>
Tensor<double> rows_tensor(const std::vector<Vec<S>>& rows) {
  const int64_t n = int64_t(rows.size()), w = n ? rows[0].size() : 0;
  Tensor<double> t({n, w});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < w; ++j) t.data[i * w + j] = rows[i](j);
  return t;
}

// [n] states [4, d] -> a tap tensor [n, 4, d].
template <class S>
Tensor<double> state_tensor(const std::vector<Mat<S>>& x) {
  const int64_t n = int64_t(x.size()), d = n ? x[0].cols() : 0;
  Tensor<double> t({n, 4, d});
  for (int64_t i = 0; i < n; ++i) std::copy(x[i].data(), x[i].data() + 4 * d, t.ptr() + i * 4 * d);
  return t;
}

template <class S>
Site<S> cast_site(const Site<double>& s) {
  return {s.fn.cast<S>(), s.base.cast<S>(), s.scale.cast<S>(), s.norm_w.cast<S>(),
          s.w_sub.cast<S>()};
}

// One mHC site around `sublayer` over a chunk's rows (the V4.1 recipe shift): each row's state
// x [4, d] collapses with the pre carried from the previous site (pre; [1, 0, 0, 0] before the
// first), is RMS-normed into the sublayer input y, and takes post and comb from the site's own
// input; pre then holds this site's. Taps name.y, name.f, name.x. Returns y.
template <class S, class Sublayer, class TapFn>
std::vector<Vec<S>> mhc_site(std::vector<Mat<S>>& x, std::vector<Vec4<S>>& pre, const Site<S>& s,
                             const ResidualConfig& cfg, const std::string& name, TapFn&& tap,
                             Sublayer&& sublayer) {
  std::vector<Coefficients<S>> c;
  std::vector<Vec<S>> y;
  for (size_t t = 0; t < x.size(); ++t) {
    c.push_back(hc_mixes(x[t], s, cfg));
    y.push_back(rms_norm<S>(collapse(x[t], pre[t]), s.norm_w, S(cfg.norm_eps)));
  }
  tap(name + ".y", rows_tensor(y));
  const std::vector<Vec<S>> f = sublayer(y);
  tap(name + ".f", rows_tensor(f));
  for (size_t t = 0; t < x.size(); ++t) x[t] = hc_post(x[t], f[t], c[t]), pre[t] = c[t].pre;
  tap(name + ".x", state_tensor(x));
  return y;
}

// One expert's output: W_out swiglu(W_in y) (W_in [2H, d]: gate rows, then up rows).
template <class S>
Vec<S> expert_output(const Mat<S>& w_in, const Mat<S>& w_out, const Vec<S>& y) {
  const int64_t H = w_in.rows() / 2;
  const Vec<S> gate_up = naive_matvec<S>(w_in, y);  // [gate ; up]
  Vec<S> hidden(H);
  for (int64_t r = 0; r < H; ++r) hidden(r) = swiglu<S>(gate_up(r), gate_up(H + r));
  return naive_matvec<S>(w_out, hidden);
}
// A row's mix of its k experts' outputs: sum_j weights[j] outputs[j], j in order.
template <class S>
Vec<S> routed_sum(const Vec<S>* outputs, const double* weights, int k) {
  Vec<S> f = Vec<S>::Zero(outputs[0].size());
  for (int j = 0; j < k; ++j) f += S(weights[j]) * outputs[j];
  return f;
}

// A table of seeded experts (the routed ones, then the shared one: W_in [2H, d] and W_out [d, H]
// each) in scalar S: every expert generated once when the table fits kMoeMaterialisedValues
// (core/vision_config.hpp), else each generated where rows route to it (a release's table is
// never held whole).
template <class S>
struct ExpertTable {
  std::vector<SeededMatrix> w_in, w_out;
  std::vector<Mat<S>> in_held, out_held;  // empty unless every expert is held

  ExpertTable() = default;
  ExpertTable(std::vector<SeededMatrix> in, std::vector<SeededMatrix> out)
      : w_in(std::move(in)), w_out(std::move(out)) {
    if (w_in.empty() ||
        !moe_materialises_every_expert(int64_t(w_in.size()), w_out[0].cols, w_in[0].cols))
      return;
    for (size_t e = 0; e < w_in.size(); ++e)
      in_held.push_back(seeded_rows<S>(w_in[e], 0, w_in[e].rows)),
          out_held.push_back(seeded_rows<S>(w_out[e], 0, w_out[e].rows));
  }

  // Row t's mix of its K experts ids[t K ..] at weights[t K ..], in that order: each expert used
  // generated once (when not held) and applied to the rows that use it.
  std::vector<Vec<S>> mix(const std::vector<Vec<S>>& y, const std::vector<int32_t>& ids,
                          const std::vector<double>& weights, int64_t K) const {
    std::vector<int32_t> used = ids;
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    std::vector<Vec<S>> out(ids.size());
    Mat<S> in_made, out_made;
    for (int32_t e : used) {
      const bool held = !in_held.empty();
      const Mat<S>& a = held ? in_held[size_t(e)]
                             : (in_made = seeded_rows<S>(w_in[size_t(e)], 0, w_in[size_t(e)].rows));
      const Mat<S>& b =
          held ? out_held[size_t(e)]
               : (out_made = seeded_rows<S>(w_out[size_t(e)], 0, w_out[size_t(e)].rows));
      for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] == e) out[i] = expert_output<S>(a, b, y[i / size_t(K)]);
    }
    std::vector<Vec<S>> f;
    for (size_t t = 0; t < y.size(); ++t)
      f.push_back(routed_sum<S>(&out[t * size_t(K)], &weights[t * size_t(K)], int(K)));
    return f;
  }
};

}  // namespace tandem::reference
