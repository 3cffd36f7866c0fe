#include "optimized/model.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/vision_config.hpp"
#include "optimized/attention.hpp"
#include "optimized/dense.hpp"
#include "optimized/engram.hpp"
#include "optimized/moe.hpp"
#include "optimized/residual.hpp"
#include "optimized/vision.hpp"

namespace tandem {
namespace {

// Columns [begin, begin + n) of a [T, w] tensor.
Tensor<float> columns(const Tensor<float>& t, int64_t begin, int64_t n) {
  const int64_t T = t.dim(0), w = t.dim(1);
  Tensor<float> out({T, n});
  for (int64_t i = 0; i < T; ++i) std::copy_n(t.ptr() + i * w + begin, n, out.ptr() + i * n);
  return out;
}

class ModelRunner {
 public:
  ModelRunner(const ModelConfig& m, const ModelWeights& w, const RunOptions& opt)
      : m_(m), w_(w), opt_(opt), d_(m.residual.d) {}

  ModelRun run(const std::vector<int32_t>& ids, const Tensor<float>& visual) {
    embed(ids, visual);  // the prompt's validation: bad input
    // From here every launch's input is an earlier launch's output (the weights and options
    // were checked by run_model): a launch refusing one is a fault of the kernels.
    try {
      return forward();
    } catch (const BadInput& e) {
      const std::string last = out_.taps.empty() ? "embed" : out_.taps.back().name;
      throw KernelFault(last, fmt::format("optimized model: a kernel output after tap '{}' was "
                                          "refused by the next launch: {}",
                                          last, e.what()));
    }
  }

 private:
  ModelRun forward() {
    for (int b = 0; b < m_.shape.blocks; ++b) {
      const std::string blk = "block" + std::to_string(b);
      for (const auto& e : w_.engram)
        if (e.block == b) engram(e, blk + ".engram.x");
      const ModelWeights::Block& k = w_.blocks[size_t(b)];
      boundary(k.attn_site, blk + ".attn");
      attention(k);
      boundary(k.ffn_site, blk + ".moe");
      moe(k, blk + ".moe");
    }
    ResidualSiteWeights head;
    head.norm_w = w_.head_norm_w;
    boundary(head, "head");
    tap("logits", dense(y_, w_.unembed));
    return std::move(out_);
  }

  void tap(std::string name, const Tensor<float>& v) { out_.taps.push_back({std::move(name), v}); }
  void log(const LaunchLog& l) { out_.launches.insert(out_.launches.end(), l.begin(), l.end()); }

  void embed(const std::vector<int32_t>& ids, const Tensor<float>& visual) {
    const int64_t T = int64_t(ids.size()), V = w_.embed.dim(0);
    if (T < 1) throw_bad_input("model prompt: no tokens");
    const int64_t images = std::count(ids.begin(), ids.end(), kImage);
    if (visual.shape != Shape{images, d_})
      throw_bad_input("model prompt: visual embeddings must be [{} IMAGE positions, {}]", images,
                      d_);
    for (int64_t i = 0; i < visual.size(); ++i)
      if (!std::isfinite(visual.data[size_t(i)]))
        throw_bad_input("model prompt: visual embedding [{}, {}] is not finite ({})", i / d_,
                        i % d_, visual.data[size_t(i)]);
    Tensor<float> e({T, d_});
    int64_t image = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = ids[size_t(t)];
      if (id >= V || (id < 0 && (id > kStart || id < kEnd)))
        throw_bad_input("model prompt: token {} is {}, outside [0, {}) and not an image marker", t,
                        id, V);
      const float* row = id >= 0        ? w_.embed.ptr() + id * d_
                         : id == kImage ? visual.ptr() + image++ * d_
                                        : w_.special.ptr() + (kStart - id) * d_;
      std::copy_n(row, d_, e.ptr() + t * d_);
      is_image_.push_back(id < 0);  // the image's layout routes with the vision-language biases
      // Engram: no lookup at image positions (look-back stops there).
      compressed_.push_back(id < 0 ? -2 : w_.compression_map[size_t(id)]);
    }
    tap("embed", e);
    x_ = Tensor<float>({T, 4, d_});
    for (int64_t t = 0; t < T; ++t)
      for (int s = 0; s < 4; ++s) std::copy_n(e.ptr() + t * d_, d_, x_.ptr() + (t * 4 + s) * d_);
  }

  // Closes the pending site (when its f is there) and opens `next` (when it has a norm weight),
  // tapping the closed site's state and the opened site's sublayer input.
  void boundary(const ResidualSiteWeights& next, const std::string& name) {
    ResidualBoundaryInputs in{m_.residual, ActDType::f32, x_, f_, coef_, next};
    const ResidualBoundaryOutputs o = run_residual_boundary(in, opt_);
    log(o.launches);
    if (!f_.data.empty()) x_ = o.x, tap(pending_ + ".x", x_), f_ = {};
    if (next.norm_w.data.empty()) return;  // closed only: coef_ keeps the pre to carry
    y_ = o.y, coef_ = o.coef, pending_ = name;
    tap(name + ".y", y_);
  }

  void engram(const ModelWeights::EngramLayer& e, const std::string& name) {
    if (!f_.data.empty()) boundary(ResidualSiteWeights{}, "");
    EngramInputs in;
    in.cfg = m_.engram;
    in.tables = e.tables;
    in.compressed = compressed_;
    in.compressed_pad = w_.compression_map[size_t(m_.engram.pad_id)];
    in.table = e.table;
    in.h = x_;
    in.wkv = e.wkv, in.gate_w = e.gate_w;
    EngramOutputs o = run_engram_layer(in, opt_);
    log(o.launches);
    x_ = std::move(o.h_out);
    tap(name, x_);
  }

  Tensor<float> dense(const Tensor<float>& x, const Tensor<float>& w) {
    DenseOutputs o = run_dense_rows({ActDType::f32, x, w, {}, false}, opt_);
    log(o.launches);
    return std::move(o.y);
  }

  void attention(const ModelWeights::Block& k) {
    const Tensor<float> qkv = dense(y_, k.wqkv);  // [T, 3d]
    AttentionInputs in{ActDType::f32, m_.shape.heads, columns(qkv, 0, d_), columns(qkv, d_, d_),
                       columns(qkv, 2 * d_, d_)};
    const AttentionOutputs o = run_attention_causal(in, opt_);
    log(o.launches);
    f_ = dense(o.o, k.wo);
    tap(pending_ + ".f", f_);
  }

  void moe(const ModelWeights::Block& k, const std::string& name) {
    MoeGateInputs gate;
    gate.logits = dense(y_, k.router);
    gate.is_image = is_image_;
    gate.bias_text = k.bias_text, gate.bias_vl = k.bias_vl;
    gate.top_k = m_.vision.top_k;
    const MoeGateOutputs g = run_moe_gate(gate, opt_);
    log(g.launches);
    tap(name + ".experts",
        Tensor<float>(g.experts.shape, {g.experts.data.begin(), g.experts.data.end()}));
    const MoeExpertOutputs o =
        run_moe_experts({ActDType::f32, y_, g.experts, g.weights, k.w_in, k.w_out}, opt_);
    log(o.launches);
    f_ = o.f;
    tap(name + ".f", f_);
  }

  const ModelConfig& m_;
  const ModelWeights& w_;
  const RunOptions& opt_;
  int64_t d_;
  std::vector<uint8_t> is_image_;
  std::vector<int64_t> compressed_;
  Tensor<float> x_;      // [T, 4, d] the streams
  Tensor<float> y_;      // [T, d] the open site's sublayer input
  Tensor<float> f_;      // [T, d] its output, until the site is closed
  Tensor<float> coef_;   // [T, 24] its coefficients (empty before the first site)
  std::string pending_;  // the open site's name
  ModelRun out_;
};

// The image path's launches on validated patches: patch embedding, unshuffle, aligner.
ImageRun embed_image(const ModelWeights& w, const Tensor<float>& patches, const RunOptions& opt) {
  const int64_t P = w.image.patch_w.dim(1), C = w.image.patch_w.dim(0);
  ImageRun r;
  auto dense = [&](const Tensor<float>& x, const Tensor<float>& W, const Tensor<float>& b,
                   bool gelu) {
    DenseOutputs o = run_dense_rows({ActDType::f32, x, W, b, gelu}, opt);
    r.launches.insert(r.launches.end(), o.launches.begin(), o.launches.end());
    return std::move(o.y);
  };
  const int64_t h = patches.dim(0), gw = patches.dim(1);
  Tensor<float> grid = dense(Tensor<float>({h * gw, P}, patches.data), w.image.patch_w, {}, false);
  grid.shape = {h, gw, C};
  r.taps.push_back({"image.grid", grid});
  UnshuffleOutputs u = run_unshuffle(grid, ActDType::f32, opt);
  r.launches.insert(r.launches.end(), u.launches.begin(), u.launches.end());
  r.taps.push_back({"image.tokens", u.tokens});
  const Tensor<float> hidden = dense(u.tokens, w.image.w1, w.image.b1, true);
  r.visual = dense(hidden, w.image.w2, w.image.b2, false);
  r.taps.push_back({"image.embed", r.visual});
  return r;
}

}  // namespace

ImageRun run_image_embedding(const ModelWeights& w, const Tensor<float>& patches,
                             const RunOptions& opt) {
  const int64_t P = w.image.patch_w.dim(1);
  if (patches.shape.size() != 3 || patches.dim(0) < 1 || patches.dim(1) < 1 || patches.dim(2) != P)
    throw_bad_input("model image: patches must be [grid_h >= 1, grid_w >= 1, {}]", P);
  for (size_t i = 0; i < patches.data.size(); ++i)
    if (!std::isfinite(patches.data[i]))
      throw_bad_input("model image: patch value {} is not finite ({})", i, patches.data[i]);
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  // From here each launch reads the previous one's output: a launch refusing it is a kernel fault.
  try {
    return embed_image(w, patches, opt);
  } catch (const BadInput& e) {
    throw KernelFault("image", fmt::format("optimized image embedding: a kernel output was "
                                           "refused by the next launch: {}",
                                           e.what()));
  }
}

ModelRun run_model(const ModelConfig& m, const ModelWeights& w, const std::vector<int32_t>& ids,
                   const Tensor<float>& visual, const RunOptions& opt) {
  const int64_t d = m.residual.d;
  if (w.blocks.size() != size_t(m.shape.blocks) || w.embed.shape.size() != 2 ||
      w.embed.dim(1) != d || w.unembed.shape != w.embed.shape || w.head_norm_w.shape != Shape{d} ||
      w.compression_map.size() != size_t(w.embed.dim(0)) ||
      w.engram.size() != m.engram.layer_ids.size())
    throw_bad_input("model weights: not those of model '{}' ({} blocks, d = {})", m.name,
                    m.shape.blocks, d);
  validate_block_threads(opt, 256, "the residual kernels use ~200 registers per thread");
  return ModelRunner(m, w, opt).run(ids, visual);
}

}  // namespace tandem
