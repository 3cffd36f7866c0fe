#include "reference/model.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/error.hpp"
#include "core/philox.hpp"
#include "reference/model_util.hpp"
#include "reference/vision.hpp"

namespace tandem::reference {
namespace {

// Seeded weights, uniform in [lo, hi) and exactly representable in float (the optimized model
// will store them as float). Each call takes the next Philox stream id.
class Weights {
 public:
  explicit Weights(uint64_t seed) : seed_(seed) {}
  Mat<double> mat(int64_t rows, int64_t cols, double lo, double hi) {
    Mat<double> m(rows, cols);
    const uint32_t id = next_++;
    for (int64_t i = 0; i < rows * cols; ++i)
      m.data()[i] =
          float(lo + (hi - lo) * philox_uniform(philox_draw(seed_, id, uint32_t(i)).v[0]));
    return m;
  }
  Vec<double> vec(int64_t n, double lo, double hi) { return mat(n, 1, lo, hi); }
  Tensor<double> tensor(Shape s, double lo, double hi) {
    const Mat<double> m = mat(shape_elements(s), 1, lo, hi);
    return Tensor<double>(std::move(s), std::vector<double>(m.data(), m.data() + m.size()));
  }
  Tensor<float> floats(Shape s, double lo, double hi) {
    const Tensor<double> t = tensor(std::move(s), lo, hi);
    return Tensor<float>(t.shape, std::vector<float>(t.data.begin(), t.data.end()));
  }
  // An mHC site with the ranges the residual cases use (no sublayer stand-in).
  Site<double> site(int64_t d) {
    const double fn = 2.0 / std::sqrt(4.0 * d);
    return {mat(24, 4 * d, -fn, fn), vec(24, -1, 1), vec(3, 0.5, 1.5), vec(d, 0.75, 1.25), {}};
  }

 private:
  uint64_t seed_;
  uint32_t next_ = 1;
};

bool is_layout(int32_t id) { return id <= kStart && id >= kEnd; }

Vec<double> silu(const Vec<double>& x) { return x.array() / (1.0 + (-x.array()).exp()); }

Vec<double> stream_mean(const Mat<double>& x) { return x.colwise().mean().transpose(); }

// [n] rows of width w -> a tap tensor [n, w].
Tensor<double> rows_tensor(const std::vector<Vec<double>>& rows) {
  const int64_t n = int64_t(rows.size()), w = n ? rows[0].size() : 0;
  Tensor<double> t({n, w});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < w; ++j) t.data[i * w + j] = rows[i](j);
  return t;
}

Tensor<double> state_tensor(const std::vector<Mat<double>>& x) {
  const int64_t n = int64_t(x.size()), d = n ? x[0].cols() : 0;
  Tensor<double> t({n, 4, d});
  for (int64_t i = 0; i < n; ++i) std::copy(x[i].data(), x[i].data() + 4 * d, t.ptr() + i * 4 * d);
  return t;
}

}  // namespace

TinyModel::TinyModel(const ModelConfig& m) : m_(m), d_(m.residual.d) {
  Weights w(m.seed);
  const int64_t V = m.engram.vocab, d = d_, C = m.vision.width, E = m.vision.experts;
  const int64_t H = m.shape.ffn_hidden, P = 3 * kPatch * kPatch;
  embed_ = w.mat(V, d, -1, 1);
  special_ = w.mat(4, d, -1, 1);
  unembed_ = w.mat(V, d, -1 / std::sqrt(double(d)), 1 / std::sqrt(double(d)));
  patch_w_ = w.floats({C, P}, -1 / std::sqrt(double(P)), 1 / std::sqrt(double(P)));
  const double a1 = 1 / std::sqrt(9.0 * C), a2 = 1 / std::sqrt(2.0 * d);
  align_w1_ = w.tensor({2 * d, 9 * C}, -a1, a1);
  align_b1_ = w.tensor({2 * d}, -0.1, 0.1);
  align_w2_ = w.tensor({d, 2 * d}, -a2, a2);
  align_b2_ = w.tensor({d}, -0.1, 0.1);
  const double s = 1 / std::sqrt(double(d)), r = 2 * std::sqrt(3.0) / std::sqrt(double(d));
  for (int b = 0; b < m.shape.blocks; ++b) {
    Block blk{w.site(d), w.site(d), {}, {}};
    blk.attn = {
        w.mat(d, d, -s, s), w.mat(d, d, -s, s), w.mat(d, d, -s, s), w.mat(d, d, -s, s), {}, {}};
    blk.moe.router = w.mat(E, d, -r, r);
    const Vec<double> bt = w.vec(E, -0.5, 0.5), bv = w.vec(E, -0.5, 0.5);
    blk.moe.bias_text.assign(bt.data(), bt.data() + E);
    blk.moe.bias_vl.assign(bv.data(), bv.data() + E);
    for (int64_t e = 0; e < E; ++e) {
      blk.moe.w_in.push_back(w.mat(H, d, -s, s));
      blk.moe.w_out.push_back(w.mat(d, H, -1 / std::sqrt(double(H)), 1 / std::sqrt(double(H))));
    }
    blocks_.push_back(std::move(blk));
  }
  const auto tables = engram_tables(m.engram);
  const int64_t lookup_width = int64_t{m.engram.lookups()} * m.engram.head_dim;
  for (size_t i = 0; i < tables.size(); ++i) {
    const double k = 1 / std::sqrt(double(lookup_width));
    engram_.push_back({m.engram.layer_ids[i], tables[i],
                       synthetic_table(tables[i].rows, m.engram.row_bytes(), m.seed + i),
                       w.floats({5 * d, lookup_width}, -k, k), w.floats({4, d}, 0.75, 1.25)});
  }
  head_ = w.site(d);
  map_ = synthetic_compression_map(m.engram.vocab, m.engram.compressed_vocab, m.seed);
}

Tensor<double> TinyModel::embed_image(const Tensor<uint8_t>& rgb) const {
  const VisionGeometry g = vision_geometry(int(rgb.dim(1)), int(rgb.dim(0)));
  const Tensor<double> grid = patch_embedding(patchify(preprocess(rgb, g)), patch_w_);
  return aligner(unshuffle(grid), align_w1_, align_b1_, align_w2_, align_b2_);
}

Prompt TinyModel::make_prompt(uint64_t seed) const {
  const int W = m_.vision.image_w, H = m_.vision.image_h, n = m_.shape.prompt_tokens;
  Tensor<uint8_t> rgb({H, W, 3});
  for (int64_t i = 0; i < rgb.size(); ++i)
    rgb.data[i] = static_cast<uint8_t>(philox_draw(seed, 1, uint32_t(i)).v[0]);
  auto text = [&](int i) { return int32_t(philox_draw(seed, 2, uint32_t(i)).v[0] % vocab()); };
  Prompt p;
  for (int i = 0; i < n / 2; ++i) p.ids.push_back(text(i));
  for (int32_t id : image_token_layout(vision_geometry(W, H))) p.ids.push_back(id);
  for (int i = n / 2; i < n; ++i) p.ids.push_back(text(i));
  p.visual = embed_image(rgb);
  return p;
}

Mat<double> TinyModel::attention(Attention& a, const std::vector<Vec<double>>& y) {
  Mat<double> out(int64_t(y.size()), d_);
  for (size_t i = 0; i < y.size(); ++i) {  // causal: token i sees the cache up to itself
    a.keys.push_back(a.wk * y[i]);
    a.values.push_back(a.wv * y[i]);
    out.row(i) =
        (a.wo * attend<Vec<double>>(a.wq * y[i], a.keys, a.values, m_.shape.heads)).transpose();
  }
  return out;
}

std::vector<Vec<double>> TinyModel::moe(const Moe& m, const std::vector<Vec<double>>& y,
                                        const std::vector<uint8_t>& is_image,
                                        Tensor<int32_t>& experts) const {
  const int64_t n = int64_t(y.size()), E = m.router.rows();
  MoeGateInputs gate;
  gate.logits = Tensor<float>({n, E});  // the router's logits in the gate kernel's dtype
  for (int64_t t = 0; t < n; ++t)
    for (int64_t e = 0; e < E; ++e) gate.logits.data[t * E + e] = float(m.router.row(e).dot(y[t]));
  gate.is_image = is_image;
  gate.bias_text = m.bias_text, gate.bias_vl = m.bias_vl;
  gate.top_k = m_.vision.top_k;
  const MoeGateRef routed = moe_gate<double>(gate);
  experts = routed.experts;
  std::vector<Vec<double>> f(n, Vec<double>::Zero(d_));
  for (int64_t t = 0; t < n; ++t)
    for (int k = 0; k < gate.top_k; ++k) {
      const int32_t e = routed.experts.data[t * gate.top_k + k];
      f[t] += routed.weights.data[t * gate.top_k + k] * (m.w_out[e] * silu(m.w_in[e] * y[t]));
    }
  return f;
}

void TinyModel::engram(const EngramLayer& e, const std::vector<int64_t>& compressed,
                       State& x) const {
  const int64_t n = int64_t(x.size());
  EngramInputs in;
  in.cfg = m_.engram;
  in.tables = e.tables;
  in.compressed = compressed;
  // History: the last (up to 3) cached positions, oldest first.
  const size_t h = std::min<size_t>(3, compressed_.size());
  in.history.assign(compressed_.end() - int64_t(h), compressed_.end());
  in.compressed_pad = map_.map.at(m_.engram.pad_id);
  in.table = e.table;
  in.wkv = e.wkv, in.gate_w = e.gate_w;
  // NOTE: Engram's reference reads the streams as float (the kernels' input); the model's
  // double state is rounded there (relative 2^-24, far below every tolerance budget).
  in.h = Tensor<float>({n, 4, d_});
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < 4 * d_; ++i) in.h.data[t * 4 * d_ + i] = float(x[t].data()[i]);
  const Tensor<int64_t> addresses =
      engram_addresses(in.cfg, in.tables, in.compressed, in.history, in.compressed_pad);
  const GateOutputs g = engram_gate_truth(in, gather_rows(in.cfg, in.table, addresses));
  for (int64_t t = 0; t < n; ++t)  // image / DEAD positions have no lookup and keep their state
    if (compressed[t] >= 0)
      std::copy(g.h_out.ptr() + t * 4 * d_, g.h_out.ptr() + (t + 1) * 4 * d_, x[t].data());
}

Eigen::MatrixXd TinyModel::append_prompt(const Prompt& p, std::vector<Tap>* taps) {
  const int64_t n = int64_t(p.ids.size()), V = vocab(), B = m_.shape.blocks;
  if (p.visual.shape.size() != 2 || (p.visual.dim(0) > 0 && p.visual.dim(1) != d_))
    throw_bad_input("model prompt: visual embeddings must be [IMAGE positions, {}]", d_);
  int64_t images = 0;
  std::vector<int64_t> raw(n);
  std::vector<uint8_t> is_image(n);
  State x(n);
  std::vector<Vec<double>> embedded(n);
  for (int64_t t = 0; t < n; ++t) {
    const int32_t id = p.ids[t];
    if (id >= V || (id < 0 && !is_layout(id)))
      throw_bad_input("model prompt: token {} is {}, outside [0, {}) and not an image marker", t,
                      id, V);
    if (id == kImage && images >= p.visual.dim(0))
      throw_bad_input("model prompt: more IMAGE positions than the {} visual embeddings",
                      p.visual.dim(0));
    is_image[t] = id < 0;       // the image's layout routes with the vision-language biases
    raw[t] = id < 0 ? -2 : id;  // Engram: no lookup at image positions, look-back stops
    embedded[t] =
        id >= 0 ? Vec<double>(embed_.row(id).transpose())
        : id == kImage
            ? Vec<double>(Eigen::Map<const Vec<double>>(p.visual.ptr() + images++ * d_, d_))
            : Vec<double>(special_.row(kStart - id).transpose());
    x[t] = embedded[t].transpose().replicate(4, 1);
  }
  if (images != p.visual.dim(0))
    throw_bad_input("model prompt: {} IMAGE positions for {} visual embeddings", images,
                    p.visual.dim(0));
  const std::vector<int64_t> compressed = compress(raw, map_);
  auto tap = [&](std::string name, Tensor<double> v) {
    if (taps) taps->push_back({std::move(name), std::move(v)});
  };
  tap("embed", rows_tensor(embedded));

  Pres pre(n, Vec4<double>(1, 0, 0, 0));
  std::vector<Eigen::VectorXd> features(n, Eigen::VectorXd(3 * d_));
  // One mHC site around sublayer F over the whole chunk: collapse with the shifted pre, F, post.
  auto site = [&](const Site<double>& s, const std::string& name, auto&& sublayer) {
    std::vector<Coefficients<double>> c;
    std::vector<Vec<double>> y;
    for (int64_t t = 0; t < n; ++t) {
      c.push_back(hc_mixes(x[t], s, m_.residual));
      y.push_back(rms_norm(collapse(x[t], pre[t]), s.norm_w, m_.residual.norm_eps));
    }
    tap(name + ".y", rows_tensor(y));
    const std::vector<Vec<double>> f = sublayer(y);
    tap(name + ".f", rows_tensor(f));
    for (int64_t t = 0; t < n; ++t) x[t] = hc_post(x[t], f[t], c[t]), pre[t] = c[t].pre;
    tap(name + ".x", state_tensor(x));
  };
  for (int64_t b = 0; b < B; ++b) {
    const std::string blk = fmt::format("block{}", b);
    for (const EngramLayer& e : engram_)
      if (e.block == b) engram(e, compressed, x), tap(blk + ".engram.x", state_tensor(x));
    if (b >= B - 3)  // DSpark's target features: this block's attention input, stream mean
      for (int64_t t = 0; t < n; ++t)
        features[t].segment((b - (B - 3)) * d_, d_) = stream_mean(x[t]);
    Block& k = blocks_[b];
    site(k.attn_site, blk + ".attn", [&](const std::vector<Vec<double>>& y) {
      const Mat<double> o = attention(k.attn, y);
      std::vector<Vec<double>> f;
      for (int64_t t = 0; t < n; ++t) f.push_back(o.row(t).transpose());
      return f;
    });
    site(k.ffn_site, blk + ".moe", [&](const std::vector<Vec<double>>& y) {
      Tensor<int32_t> experts;
      auto f = moe(k.moe, y, is_image, experts);
      tap(blk + ".moe.experts",
          Tensor<double>(experts.shape, {experts.data.begin(), experts.data.end()}));
      return f;
    });
  }
  std::vector<Vec<double>> y;
  Eigen::MatrixXd logits(n, V);
  for (int64_t t = 0; t < n; ++t) {
    y.push_back(rms_norm(collapse(x[t], pre[t]), head_.norm_w, m_.residual.norm_eps));
    logits.row(t) = (unembed_ * y[t]).transpose();
  }
  tap("head.y", rows_tensor(y));
  if (taps) {
    Tensor<double> l({n, V});
    for (int64_t t = 0; t < n; ++t)
      for (int64_t v = 0; v < V; ++v) l.data[t * V + v] = logits(t, v);
    tap("logits", std::move(l));
  }
  compressed_.insert(compressed_.end(), compressed.begin(), compressed.end());
  features_.insert(features_.end(), features.begin(), features.end());
  return logits;
}

Eigen::MatrixXd TinyModel::append(const std::vector<int32_t>& tokens) {
  return append_prompt({tokens, Tensor<double>({0, d_})});
}

void TinyModel::rollback(int64_t length) {
  for (Block& b : blocks_) b.attn.keys.resize(length), b.attn.values.resize(length);
  compressed_.resize(length);
  features_.resize(length);
}

Eigen::MatrixXd TinyModel::cache_snapshot() const {
  Eigen::MatrixXd m(cached(), 2 * d_ * int64_t(blocks_.size()));
  for (int64_t j = 0; j < cached(); ++j)
    for (size_t b = 0; b < blocks_.size(); ++b)
      m.row(j).segment(2 * d_ * int64_t(b), 2 * d_) << blocks_[b].attn.keys[j].transpose(),
          blocks_[b].attn.values[j].transpose();
  return m;
}

Eigen::MatrixXd TinyModel::target_features() const {
  Eigen::MatrixXd m(cached(), 3 * d_);
  for (int64_t j = 0; j < cached(); ++j) m.row(j) = features_[j].transpose();
  return m;
}

}  // namespace tandem::reference
