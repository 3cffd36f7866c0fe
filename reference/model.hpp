#pragma once
// The end-to-end tiny V4.1-style model (DESIGN 5; issue 7a), reference in double. Per token the
// state is 4 residual streams [4, d]. A prompt's text ids are embedded; an image enters through
// the vision path (pixels -> patches -> linear embedding -> 3x3 unshuffle -> aligner) at its
// layout's IMAGE positions. Then `blocks` blocks, each: Engram on the streams (blocks listed in
// engram.layer_ids), an mHC site around attention over the compressed, quantized, sparse KV cache
// (reference/model_cache.hpp), an mHC site around a small
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
#include "problem/model.hpp"
#include "reference/backbone.hpp"
#include "reference/engram.hpp"
#include "reference/model_cache.hpp"
#include "reference/model_util.hpp"  // ExpertTable
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

// The model's seeded weights, every value exactly representable in float: one source for the
// truth and baseline references and for the optimized model. The vocabulary-sized matrices and
// the experts are generated where they are read (core/seeded_matrix.hpp).
struct TinyModelWeights {
  struct Block {
    Site<double> attn_site, ffn_site;
    ModelWeights::Attention attn;           // float already: shared with the kernels
    Mat<double> router;                     // [E, d]
    std::vector<float> bias_text, bias_vl;  // [E] (no bias_text at a hash block)
    Tensor<int32_t> tid2eid;                // [V, top_k] at a hash block, else empty
    std::vector<SeededMatrix> w_in, w_out;  // E + 1 x [2 hidden, d], [d, hidden]: then the shared
  };
  using EngramLayer = ModelWeights::EngramLayer;  // float already: shared with the kernels
  struct Vision {
    Tensor<float> patch_w;          // [C, 588]
    Tensor<double> w1, b1, w2, b2;  // the aligner
  };
  SeededMatrix embed, unembed;  // [V, d] each
  Mat<double> special;          // [4, d] for START..END
  Vision vision;
  std::vector<Block> blocks;
  std::vector<EngramLayer> engram;
  Site<double> head;
  CompressionMap map;
};
TinyModelWeights tiny_model_weights(const ModelConfig& m);

// The verification prompt before embedding: prompt_tokens text ids around one seeded
// vision.image_w x image_h image's layout (half before it, half after), and its pixels [H, W, 3].
struct PromptImage {
  std::vector<int32_t> ids;
  Tensor<uint8_t> rgb;
};
PromptImage make_prompt_image(const ModelConfig& m, uint64_t seed);
// The same prompt with the image through the vision path in double.
Prompt make_prompt(const ModelConfig& m, const TinyModelWeights::Vision& w, uint64_t seed);
// Pixels [H, W, 3] -> preprocessed patches [grid_h, grid_w, 588] (bf16 values as floats).
Tensor<float> image_patches(const Tensor<uint8_t>& rgb, const ImageSizing& sizing);
// Patches -> one embedding per visual token [tokens_h * tokens_w, d] (patch embedding, 3x3
// unshuffle, aligner) in scalar S; with the grid and unshuffled tokens on the way.
struct ImageEmbedding {
  Tensor<double> grid, tokens, embed;  // [h, w, C], [N, 9C], [N, d]
};
template <class S>
ImageEmbedding embed_patches(const TinyModelWeights::Vision& w, const Tensor<float>& patches);
Tensor<double> embed_image(const TinyModelWeights::Vision& w, const Tensor<uint8_t>& rgb,
                           const ImageSizing& sizing);

// The model in scalar S: double is the truth; float, with sums in plain order, is the baseline
// of the tolerance policy (DESIGN 4) for the optimized model.
template <class S>
class TinyModelT : public Backbone {
 public:
  explicit TinyModelT(const ModelConfig& m) : TinyModelT(m, tiny_model_weights(m)) {}
  TinyModelT(const ModelConfig& m, const TinyModelWeights& w);

  Prompt make_prompt(uint64_t seed) const { return reference::make_prompt(m_, vision_, seed); }
  Tensor<double> embed_image(const Tensor<uint8_t>& rgb) const {
    return reference::embed_image(vision_, rgb, m_.vision.sizing);
  }

  // Appends a chunk; logits [n, vocab], and the chunk's taps when `taps` is given. `forced`:
  // records read in place of the model's own (reference/model_cache.hpp).
  Eigen::MatrixXd append_prompt(const Prompt& p, std::vector<Tap>* taps = nullptr,
                                const ForcedTaps* forced = nullptr);

  int64_t vocab() const override { return m_.engram.vocab; }
  Eigen::MatrixXd append(const std::vector<int32_t>& tokens) override;
  void rollback(int64_t length) override;
  int64_t cached() const override { return static_cast<int64_t>(compressed_.size()); }
  Eigen::MatrixXd cache_snapshot() const override;
  Eigen::MatrixXd target_features() const override;

 private:
  struct Moe {
    Mat<S> router;                          // [E, d]
    std::vector<float> bias_text, bias_vl;  // [E]
    Tensor<int32_t> tid2eid;                // [V, top_k] at a hash block
    ExpertTable<S> experts;                 // E + 1 experts: the routed ones, then the shared
  };
  struct Block {
    Site<S> attn_site, ffn_site;
    Moe moe;
  };
  using State = std::vector<Mat<S>>;  // per token [4, d]
  using Pres = std::vector<Vec4<S>>;  // per token: the pre the next site collapses with

  std::vector<Vec<S>> moe(const Moe& m, const std::vector<Vec<S>>& y,
                          const std::vector<int32_t>& token_ids,
                          const std::vector<uint8_t>& is_image, Tensor<int32_t>& experts) const;
  void engram(const TinyModelWeights::EngramLayer& e, const std::vector<int64_t>& compressed,
              State& x) const;

  ModelConfig m_;
  int64_t d_;
  TinyModelWeights::Vision vision_;
  SeededMatrix embed_, unembed_;  // rows generated where read: the unembedding in chunks
  Mat<S> special_;
  std::vector<Block> blocks_;
  ModelCache<S> cache_;
  std::vector<TinyModelWeights::EngramLayer> engram_;
  Site<S> head_;
  CompressionMap map_;
  std::vector<int64_t> compressed_;        // per cached position (Engram's history)
  std::vector<Eigen::VectorXd> features_;  // per cached position [3d]
};

using TinyModel = TinyModelT<double>;
using TinyModelBaseline = TinyModelT<float>;

}  // namespace tandem::reference
