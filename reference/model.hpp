#pragma once
// The end-to-end tiny V4.1-style model (DESIGN 5; issue 7a), reference in double. Per token the
// state is 4 residual streams [4, d]. A prompt's text ids are embedded; an image enters through
// the vision path (pixels -> patches -> linear embedding -> 3x3 unshuffle -> aligner) at its
// layout's IMAGE positions. Then `blocks` blocks, each: Engram on the streams (blocks listed in
// engram.layer_ids), an mHC site around causal multi-head attention, an mHC site around a small
// MoE whose router adds per-modality biases; both sites follow the V4.1 recipe shift (a site
// collapses with the pre made at the previous site; the first with [1, 0, 0, 0]). The head
// collapses, norms and unembeds. Every intermediate tensor is a named tap, in execution order.
// The model is a Backbone: DSpark drafts from its target features (the attention input of the
// last three blocks, mean over the 4 streams).
#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

#include "core/model_config.hpp"
#include "core/tensor.hpp"
#include "reference/backbone.hpp"
#include "reference/engram.hpp"
#include "reference/residual.hpp"

namespace tandem::reference {

struct Tap {
  std::string name;
  Tensor<double> value;  // [tokens, ...]
};

// A prompt: text ids (>= 0) and an image's layout ids (VisionToken: START, IMAGE, NEWLINE,
// END); `visual` holds one embedding per IMAGE position, in layout order.
struct Prompt {
  std::vector<int32_t> ids;
  Tensor<double> visual;  // [IMAGE positions, d]
};

class TinyModel : public Backbone {
 public:
  explicit TinyModel(const ModelConfig& m);

  // The verification prompt: prompt_tokens text ids around one seeded vision.image_w x image_h
  // image (half before it, half after).
  Prompt make_prompt(uint64_t seed) const;
  // Pixels [H, W, 3] -> one embedding per visual token [tokens_h * tokens_w, d].
  Tensor<double> embed_image(const Tensor<uint8_t>& rgb) const;

  // Appends a chunk; logits [n, vocab], and the chunk's taps when `taps` is given.
  Eigen::MatrixXd append_prompt(const Prompt& p, std::vector<Tap>* taps = nullptr);

  int64_t vocab() const override { return m_.engram.vocab; }
  Eigen::MatrixXd append(const std::vector<int32_t>& tokens) override;
  void rollback(int64_t length) override;
  int64_t cached() const override { return static_cast<int64_t>(compressed_.size()); }
  Eigen::MatrixXd cache_snapshot() const override;
  Eigen::MatrixXd target_features() const override;

 private:
  struct Attention {
    Mat<double> wq, wk, wv, wo;             // [d, d] each
    std::vector<Vec<double>> keys, values;  // the KV cache, one [d] row per position
  };
  struct Moe {
    Mat<double> router;                     // [E, d]
    std::vector<float> bias_text, bias_vl;  // [E]
    std::vector<Mat<double>> w_in;          // E x [hidden, d]
    std::vector<Mat<double>> w_out;         // E x [d, hidden]
  };
  struct Block {
    Site<double> attn_site, ffn_site;
    Attention attn;
    Moe moe;
  };
  struct EngramLayer {
    int block = 0;
    EngramLayerTables tables;
    std::vector<uint8_t> table;
    Tensor<float> wkv, gate_w;  // [5d, lookups * head_dim], [4, d]
  };
  using State = std::vector<Mat<double>>;  // per token [4, d]
  using Pres = std::vector<Vec4<double>>;  // per token: the pre the next site collapses with

  Mat<double> attention(Attention& a, const std::vector<Vec<double>>& y);
  std::vector<Vec<double>> moe(const Moe& m, const std::vector<Vec<double>>& y,
                               const std::vector<uint8_t>& is_image,
                               Tensor<int32_t>& experts) const;
  void engram(const EngramLayer& e, const std::vector<int64_t>& compressed, State& x) const;

  ModelConfig m_;
  int64_t d_;
  Mat<double> embed_, special_, unembed_;  // [V, d], [4, d] for START..END, [V, d]
  Tensor<float> patch_w_;                  // [C, 588]
  Tensor<double> align_w1_, align_b1_, align_w2_, align_b2_;
  std::vector<Block> blocks_;
  std::vector<EngramLayer> engram_;
  Site<double> head_;
  CompressionMap map_;
  std::vector<int64_t> compressed_;        // per cached position (Engram's history)
  std::vector<Eigen::VectorXd> features_;  // per cached position [3d]
};

}  // namespace tandem::reference
