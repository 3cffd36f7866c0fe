#pragma once
// The end-to-end tiny model's own sizes (its blocks reuse the residual, Engram, vision and
// DSpark sections) and its KV cache's layer mix (DESIGN 5.5, V4.1); parsed in
// core/model_config.cpp.
#include <vector>

#include "core/attention_lora.hpp"

namespace tandem {

// V4.1's candidate selection at its size, the indexer's config-shaped row: layer 20 keeps the top
// 2048 blocks of 8 positions (DESIGN 5.5); the row scores 4608 blocks before its tokens.
inline constexpr int kV41CandidateBlock = 8, kV41CandidateKeep = 2048;
inline constexpr int64_t kCandidateRowPositions = 4608 * kV41CandidateBlock;

struct ModelShape {
  int blocks = 4;          // attention + MoE blocks, two mHC sites each; >= 3 (DSpark features)
  int heads = 4;           // attention heads of 512 dims (one record is K and V), a multiple of 4
  AttentionLora lora;      // q_lora_rank, o_groups, o_lora_rank
  int ffn_hidden = 128;    // hidden width of each MoE expert
  int prompt_tokens = 12;  // text tokens around the image in the verification prompt
  // Per block: 0 (window only), 2 (softmax pooling of 2 tokens) or 1 (one entry per token).
  std::vector<int> compress_ratios{0, 2, 2, 1};
  // Compressing blocks that own a cache (compressor, entries); every other compressing block
  // reads the cache of the last source before it (same ratio). Window-only blocks own a window.
  std::vector<int> kv_source_layers{1, 3};
  // Compressing blocks that score index keys and select; every other compressing block reuses
  // the selection of the last index source before it (which reads the same cache).
  std::vector<int> index_source_layers{1, 3};
  int window = 8;       // window_size: the newest positions every block attends to
  int index_heads = 2;  // index_n_heads (128 dims each)
  int index_topk = 4;   // index_topk: compressed entries selected per token
  // The release layer each block stands for, ascending (default 0, 1, .., blocks - 1): a model at
  // a release's widths samples a few of its layers. Engram runs before the block standing for
  // each of engram.layer_ids.
  std::vector<int> layers{0, 1, 2, 3};
  // Blocks standing for release layers below num_hash_layers route text tokens by a seeded
  // token-id table [vocab, top_k] (V4's tid2eid) instead of ranking; image tokens still rank.
  int hash_layers = 0;
  // The verification prompt: prompt_tokens of text around the config's image, or text alone (a
  // release's 1920x1080 image is 968 positions: through a model at the release's widths, far
  // past the work budget; the vision component runs that image).
  bool prompt_image = true;

  bool is_kv_source(int b) const;
  bool is_index_source(int b) const;
  // The block whose cache block b reads (b itself for window-only blocks and sources).
  int kv_source(int b) const;
  // The block whose selection block b attends with (-1 for window-only blocks).
  int index_source(int b) const;
  // The block standing for release layer `layer`, or -1.
  int block_of_layer(int layer) const;
  bool hashes(int b) const { return layers[size_t(b)] < hash_layers; }
};

}  // namespace tandem
