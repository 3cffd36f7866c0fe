#include "reference/model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/philox.hpp"
#include "core/tensor_checks.hpp"
#include "reference/model_util.hpp"
#include "reference/vision.hpp"

namespace tandem::reference {
namespace {

// Seeded weights, uniform in [lo, hi) and exactly representable in float (the optimized model
// will store them as float). Each call takes the next Philox stream id.
class Weights {
 public:
  explicit Weights(uint64_t seed) : seed_(seed) {}
  uint32_t next_stream() { return next_++; }
  // The next stream's matrix, generated where it is read.
  SeededMatrix seeded(int64_t rows, int64_t cols, double lo, double hi) {
    return {seed_, next_++, rows, cols, lo, hi};
  }
  Mat<double> mat(int64_t rows, int64_t cols, double lo, double hi) {
    return seeded_rows<double>(seeded(rows, cols, lo, hi), 0, rows);
  }
  Vec<double> vec(int64_t n, double lo, double hi) { return mat(n, 1, lo, hi); }
  // Passes over n streams: the weights after them keep their values.
  void skip(uint32_t n) { next_ += n; }
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
  // Block b's attention: the tensors of its roles (core/model_shape.hpp), projections scaled by
  // 1 / sqrt(fan-in), gated pooling's gate twice as wide, norm weights around 1.
  ModelWeights::Attention attention(const ModelShape& shape, int b, int64_t d) {
    const int64_t H = shape.heads, ih = shape.index_heads, D = kKvMainDims, I = kIndexKeyDims;
    const int64_t Rq = shape.lora.q_rank;
    const double s = 1 / std::sqrt(double(d));
    ModelWeights::Attention a = lora_weights(H, d, shape.lora, [&](auto... size_and_range) {
      return Projection(seeded(size_and_range...));
    });
    a.sinks = floats({H}, -1, 1);
    const int ratio = shape.compress_ratios[size_t(b)];
    if (shape.kv_source(b) == b) {
      a.window_wkv = floats({D, d}, -s, s);
      a.window_norm = floats({D}, 0.75, 1.25);
    }
    if (ratio > 0 && shape.is_kv_source(b)) {
      a.comp_wkv = floats({D, d}, -s, s);
      if (ratio > 1) a.comp_wgate = floats({D, d}, -2 * s, 2 * s);
      a.comp_norm = floats({D}, 0.75, 1.25);
    }
    if (shape.is_index_source(b)) {
      a.index_wq = floats({ih * I, Rq}, -1 / std::sqrt(double(Rq)), 1 / std::sqrt(double(Rq)));
      a.index_w = floats({ih, d}, -s, s);
      a.index_wk = floats({I, D}, -1 / std::sqrt(double(D)), 1 / std::sqrt(double(D)));
      a.index_norm = floats({I}, 0.75, 1.25);
    }
    return a;
  }

 private:
  uint64_t seed_;
  uint32_t next_ = 1;
};

bool is_layout(int32_t id) { return id <= kStart && id >= kEnd; }

}  // namespace

TinyModelWeights tiny_model_weights(const ModelConfig& m) {
  Weights w(m.seed);
  const int64_t V = m.engram.vocab, d = m.residual.d, C = m.vision.width, E = m.vision.experts;
  const int64_t H = m.shape.ffn_hidden, P = 3 * kPatch * kPatch;
  TinyModelWeights out;
  out.embed = w.seeded(V, d, -1, 1);
  out.special = w.mat(4, d, -1, 1);
  out.unembed = w.seeded(V, d, -1 / std::sqrt(double(d)), 1 / std::sqrt(double(d)));
  if (m.shape.prompt_image) {
    out.vision.patch_w = w.floats({C, P}, -1 / std::sqrt(double(P)), 1 / std::sqrt(double(P)));
    const double a1 = 1 / std::sqrt(9.0 * C), a2 = 1 / std::sqrt(2.0 * d);
    out.vision.w1 = w.tensor({2 * d, 9 * C}, -a1, a1);
    out.vision.b1 = w.tensor({2 * d}, -0.1, 0.1);
    out.vision.w2 = w.tensor({d, 2 * d}, -a2, a2);
    out.vision.b2 = w.tensor({d}, -0.1, 0.1);
  } else {
    w.skip(5);  // a text-only model's image path, never run (1.2 GB in double at V4.1's widths)
    out.vision.patch_w = Tensor<float>({0});
    out.vision.w1 = out.vision.b1 = out.vision.w2 = out.vision.b2 = Tensor<double>({0});
  }
  const double s = 1 / std::sqrt(double(d)), r = 2 * std::sqrt(3.0) / std::sqrt(double(d));
  for (int b = 0; b < m.shape.blocks; ++b) {
    TinyModelWeights::Block blk;
    blk.attn_site = w.site(d);
    blk.ffn_site = w.site(d);
    blk.attn = w.attention(m.shape, b, d);
    blk.router = w.mat(E, d, -r, r);
    const Vec<double> bt = w.vec(E, -0.5, 0.5), bv = w.vec(E, -0.5, 0.5);
    blk.bias_text.assign(bt.data(), bt.data() + E);
    blk.bias_vl.assign(bv.data(), bv.data() + E);
    for (int64_t e = 0; e <= E; ++e) {                // the routed experts, then the shared one
      blk.w_in.push_back(w.seeded(2 * H, d, -s, s));  // gate rows, then up rows
      blk.w_out.push_back(w.seeded(d, H, -1 / std::sqrt(double(H)), 1 / std::sqrt(double(H))));
    }
    out.blocks.push_back(std::move(blk));
  }
  const auto tables = engram_tables(m.engram);
  const int64_t lookup_width = int64_t{m.engram.lookups()} * m.engram.head_dim;
  for (size_t i = 0; i < tables.size(); ++i) {
    const double k = 1 / std::sqrt(double(lookup_width));
    out.engram.push_back(
        {m.shape.block_of_layer(m.engram.layer_ids[i]), tables[i],
         synthetic_table(tables[i].rows, m.engram.row_bytes(), m.seed + i),
         std::make_shared<const Fp8CachedWeight>(w.floats({5 * d, lookup_width}, -k, k)),
         w.floats({4, d}, 0.75, 1.25)});
  }
  out.head = w.site(d);
  out.map = synthetic_compression_map(m.engram.vocab, m.engram.compressed_vocab, m.seed);
  for (int b = 0; b < m.shape.blocks; ++b)  // last: the other weights keep their streams
    if (m.shape.hashes(b)) {
      TinyModelWeights::Block& blk = out.blocks[size_t(b)];
      blk.bias_text.clear();  // a hash layer has no ffn.gate.bias
      blk.tid2eid = seeded_tid2eid(V, int(E), m.vision.top_k, m.seed, w.next_stream());
    }
  return out;
}

template <class S>
TinyModelT<S>::TinyModelT(const ModelConfig& m, const TinyModelWeights& w)
    : m_(m),
      d_(m.residual.d),
      vision_(w.vision),
      embed_(w.embed),
      unembed_(w.unembed),
      special_(w.special.cast<S>()),
      cache_(m,
             [&] {
               std::vector<ModelWeights::Attention> a;
               for (const auto& b : w.blocks) a.push_back(b.attn);
               return a;
             }()),
      engram_(w.engram),
      head_(cast_site<S>(w.head)),
      map_(w.map) {
  for (const auto& b : w.blocks)
    blocks_.push_back(
        {cast_site<S>(b.attn_site),
         cast_site<S>(b.ffn_site),
         {b.router.cast<S>(), b.bias_text, b.bias_vl, b.tid2eid, ExpertTable<S>(b.w_in, b.w_out)}});
}

Tensor<float> image_patches(const Tensor<uint8_t>& rgb, const ImageSizing& sizing) {
  return patchify(preprocess(rgb, vision_geometry(int(rgb.dim(1)), int(rgb.dim(0)), sizing)));
}

template <class S>
ImageEmbedding embed_patches(const TinyModelWeights::Vision& w, const Tensor<float>& patches) {
  if (w.w1.data.empty()) throw_bad_input("{}", kNoImagePath);
  ImageEmbedding e;
  e.grid = patch_embedding<S>(patches, w.patch_w);
  e.tokens = unshuffle(e.grid);
  e.embed = aligner<S>(e.tokens, w.w1, w.b1, w.w2, w.b2);
  return e;
}
template ImageEmbedding embed_patches<double>(const TinyModelWeights::Vision&,
                                              const Tensor<float>&);
template ImageEmbedding embed_patches<float>(const TinyModelWeights::Vision&, const Tensor<float>&);

Tensor<double> embed_image(const TinyModelWeights::Vision& w, const Tensor<uint8_t>& rgb,
                           const ImageSizing& sizing) {
  return embed_patches<double>(w, image_patches(rgb, sizing)).embed;
}

PromptImage make_prompt_image(const ModelConfig& m, uint64_t seed) {
  const int W = m.vision.image_w, H = m.vision.image_h, n = m.shape.prompt_tokens;
  const int64_t V = m.engram.vocab;
  PromptImage p{{}, Tensor<uint8_t>({H, W, 3})};
  for (int64_t i = 0; i < p.rgb.size(); ++i)
    p.rgb.data[i] = static_cast<uint8_t>(philox_draw(seed, 1, uint32_t(i)).v[0]);
  auto text = [&](int i) { return int32_t(philox_draw(seed, 2, uint32_t(i)).v[0] % V); };
  for (int i = 0; i < n / 2; ++i) p.ids.push_back(text(i));
  for (int32_t id : image_token_layout(vision_geometry(W, H, m.vision.sizing))) p.ids.push_back(id);
  for (int i = n / 2; i < n; ++i) p.ids.push_back(text(i));
  return p;
}

Prompt make_prompt(const ModelConfig& m, const TinyModelWeights::Vision& w, uint64_t seed) {
  PromptImage p = make_prompt_image(m, seed);
  return {std::move(p.ids), embed_image(w, p.rgb, m.vision.sizing)};
}

template <class S>
std::vector<Vec<S>> TinyModelT<S>::moe(const Moe& m, const std::vector<Vec<S>>& y,
                                       const std::vector<int32_t>& token_ids,
                                       const std::vector<uint8_t>& is_image,
                                       Tensor<int32_t>& experts) const {
  const int64_t n = int64_t(y.size()), E = m.router.rows();
  MoeGateInputs gate;
  gate.logits = Tensor<float>({n, E});  // the router's logits in the gate kernel's dtype
  for (int64_t t = 0; t < n; ++t)
    for (int64_t e = 0; e < E; ++e)
      gate.logits.data[t * E + e] = float(naive_dot<S>(m.router.row(e), y[t]));
  gate.is_image = is_image;
  gate.bias_text = m.bias_text, gate.bias_vl = m.bias_vl;
  gate.top_k = m_.vision.top_k;
  if (m.tid2eid.size() > 0) gate.tid2eid = m.tid2eid, gate.token_ids = token_ids;
  const MoeGateRef routed = moe_gate<S>(gate);
  experts = routed.experts;
  const int64_t k = gate.top_k, K = k + 1;  // the routed experts, then the shared one
  std::vector<int32_t> ids(size_t(n * K), int32_t(E));
  std::vector<double> weights(size_t(n * K), 1.0);  // the shared expert's: 1
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j)
      ids[size_t(t * K + j)] = experts.data[size_t(t * k + j)],
                         weights[size_t(t * K + j)] = routed.weights.data[size_t(t * k + j)];
  // Each token's mix in its routing order, the shared expert last.
  return m.experts.mix(y, ids, weights, K);
}

template <class S>
void TinyModelT<S>::engram(const TinyModelWeights::EngramLayer& e,
                           const std::vector<int64_t>& compressed, State& x) const {
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
  // NOTE: Engram's reference reads the streams as float (the kernels' input); the truth's
  // double state is rounded there (relative 2^-24, far below every tolerance budget).
  in.h = Tensor<float>({n, 4, d_});
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < 4 * d_; ++i) in.h.data[t * 4 * d_ + i] = float(x[t].data()[i]);
  const Tensor<int64_t> addresses =
      engram_addresses(in.cfg, in.tables, in.compressed, in.history, in.compressed_pad);
  const Tensor<float> rows = gather_rows(in, addresses);
  const GateOutputs g =
      std::is_same_v<S, double> ? engram_gate_truth(in, rows) : engram_gate_baseline(in, rows);
  for (int64_t t = 0; t < n; ++t)  // image / DEAD positions: gate 0, they keep their state
    if (compressed[t] >= 0)
      for (int64_t i = 0; i < 4 * d_; ++i) x[t].data()[i] = S(g.h_out.data[t * 4 * d_ + i]);
}

template <class S>
Eigen::MatrixXd TinyModelT<S>::append_prompt(const Prompt& p, std::vector<Tap>* taps,
                                             const ForcedTaps* forced) {
  const int64_t n = int64_t(p.ids.size()), V = vocab(), B = m_.shape.blocks;
  if (p.visual.shape.size() != 2 || (p.visual.dim(0) > 0 && p.visual.dim(1) != d_))
    throw_bad_input("model prompt: visual embeddings must be [IMAGE positions, {}]", d_);
  int64_t images = 0;
  std::vector<int64_t> raw(n);
  std::vector<uint8_t> is_image(n);
  State x(n);
  std::vector<Vec<S>> embedded(n);
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
        id >= 0 ? Vec<S>(seeded_rows<S>(embed_, id, 1).transpose())
        : id == kImage
            ? Vec<S>(Eigen::Map<const Vec<double>>(p.visual.ptr() + images++ * d_, d_).cast<S>())
            : Vec<S>(special_.row(kStart - id).transpose());
    x[t] = embedded[t].transpose().replicate(4, 1);
  }
  if (images != p.visual.dim(0))
    throw_bad_input("model prompt: {} IMAGE positions for {} visual embeddings", images,
                    p.visual.dim(0));
  require_finite(p.visual, "model prompt", "visual");
  const std::vector<int64_t> compressed = compress(raw, map_);
  auto tap = [&](std::string name, Tensor<double> v) {
    if (taps) taps->push_back({std::move(name), std::move(v)});
  };
  tap("embed", rows_tensor(embedded));

  Pres pre(n, Vec4<S>(1, 0, 0, 0));
  std::vector<Eigen::VectorXd> features(n, Eigen::VectorXd(3 * d_));
  // One mHC site around sublayer F over the whole chunk: collapse with the shifted pre, F, post.
  auto site = [&](const Site<S>& s, const std::string& name, auto&& sublayer) {
    mhc_site(x, pre, s, m_.residual, name, tap, sublayer);
  };
  for (int64_t b = 0; b < B; ++b) {
    const std::string blk = fmt::format("block{}", b);
    for (const auto& e : engram_)
      if (e.block == b) engram(e, compressed, x), tap(blk + ".engram.x", state_tensor(x));
    if (b >= B - 3)  // DSpark's target features: this block's attention input, stream mean
      for (int64_t t = 0; t < n; ++t)
        features[t].segment((b - (B - 3)) * d_, d_) =
            x[t].colwise().mean().transpose().template cast<double>();
    Block& k = blocks_[b];
    site(k.attn_site, blk + ".attn", [&](const std::vector<Vec<S>>& y) {
      return cache_.attend(int(b), y, cached(), tap, forced);
    });
    site(k.ffn_site, blk + ".moe", [&](const std::vector<Vec<S>>& y) {
      Tensor<int32_t> experts;
      auto f = moe(k.moe, y, p.ids, is_image, experts);
      tap(blk + ".moe.experts",
          Tensor<double>(experts.shape, {experts.data.begin(), experts.data.end()}));
      return f;
    });
  }
  std::vector<Vec<S>> y;
  for (int64_t t = 0; t < n; ++t) {
    y.push_back(rms_norm<S>(collapse(x[t], pre[t]), head_.norm_w, S(m_.residual.norm_eps)));
  }
  const Eigen::MatrixXd logits = unembed_logits<S>(Projection(unembed_), y);
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

template <class S>
Eigen::MatrixXd TinyModelT<S>::append(const std::vector<int32_t>& tokens) {
  return append_prompt({tokens, Tensor<double>({0, d_})});
}

template <class S>
void TinyModelT<S>::rollback(int64_t length) {
  check_rollback(length, cached());
  cache_.rollback(length);
  compressed_.resize(length);
  features_.resize(length);
}

template <class S>
Eigen::MatrixXd TinyModelT<S>::cache_snapshot() const {
  const std::vector<double> v = cache_.snapshot();
  return Eigen::Map<const Eigen::MatrixXd>(v.data(), int64_t(v.size()), 1);
}

template <class S>
Eigen::MatrixXd TinyModelT<S>::target_features() const {
  Eigen::MatrixXd m(cached(), 3 * d_);
  for (int64_t j = 0; j < cached(); ++j) m.row(j) = features_[j].transpose();
  return m;
}

template class TinyModelT<double>;
template class TinyModelT<float>;

}  // namespace tandem::reference
