#pragma once
// The end-to-end tiny model run by the optimized kernels (issue 7a): the same computation as
// reference/model.hpp, orchestrated on the host, one launcher per stage. The V4.1 recipe shift
// is fused where the kernels allow it: between two sublayers one residual_single_pass closes a
// site and opens the next; at an Engram layer the site is closed (residual_post), Engram updates
// the streams, and the next site opens with the carried pre. Activations are f32.
//
// Attention runs over the compressed, quantized, sparse cache of reference/model_cache.hpp from
// the KV cache kernels, the indexer, the top-k, the queries' RoPE and sparse attention.
//
// Scope: a sequence appended chunk by chunk (OptimizedModel): a prefill from position 0, then
// decode steps or short chunks; no rollback (the reference's speculative decoding runs on the
// reference). The image enters as preprocessed patches (the reference's resize, pad and
// patchify, shared by every run: there is no preprocessing kernel).
#include <cstdint>
#include <memory>
#include <vector>

#include "core/model_config.hpp"
#include "optimized/backend.hpp"
#include "problem/model.hpp"

namespace tandem {

// The image path: preprocessed patches [grid_h, grid_w, 588] -> patch embedding (dense_rows) ->
// 3x3 unshuffle (vision_unshuffle; its inverse runs too) -> aligner (dense_rows with bias + GELU,
// then with bias): one embedding per visual token. Taps image.grid, image.tokens, image.embed.
ImageRun run_image_embedding(const ModelWeights& w, const Tensor<float>& patches,
                             const RunOptions& opt);

class ModelRunner;

// One sequence's model and cache: every block's window ring, compressor state, entries (records
// and latents) and index keys, kept between appends. The first append is a prefill from
// position 0 (the compressor's prefill kernels; the window's ring gets max(window, its tokens)
// slots, so each of its queries reads records the same launch wrote); each later
// chunk continues at length() with the compressor's decode kernel per token (the state
// carried), the new entries' index keys alone, and at most ring slots - window + 1 tokens (no
// record a query of the chunk reads is overwritten); a decode step is a chunk of one token.
// Weights and options are validated here (BadInput), a chunk by append (a refused chunk leaves
// the sequence as it was; after a KernelFault its cache is partly updated, and a later append
// is BadInput: start a new sequence).
class OptimizedModel {
 public:
  OptimizedModel(const ModelConfig& m, const ModelWeights& w, const RunOptions& opt);
  ~OptimizedModel();
  OptimizedModel(OptimizedModel&&) noexcept;
  OptimizedModel& operator=(OptimizedModel&&) noexcept;
  // ids: text ids in [0, V) and the image's layout ids (VisionToken); visual: one embedding per
  // IMAGE position [IMAGE positions, d], in layout order. The chunk's taps and launches.
  ModelRun append(const std::vector<int32_t>& ids, const Tensor<float>& visual);
  int64_t length() const;

 private:
  std::unique_ptr<ModelRunner> runner_;  // copies m and opt; w (large) must outlive it
};

// One prompt from an empty cache: OptimizedModel(m, w, opt).append(ids, visual).
ModelRun run_model(const ModelConfig& m, const ModelWeights& w, const std::vector<int32_t>& ids,
                   const Tensor<float>& visual, const RunOptions& opt);

}  // namespace tandem
