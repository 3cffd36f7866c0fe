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
// Scope: one prompt from an empty cache (a prefill: the window keeps every position's record, a
// slot each, and the compressor runs its prefill kernels); the image enters as preprocessed
// patches (the reference's resize, pad and patchify, shared by every run: there is no
// preprocessing kernel).
#include <cstdint>
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

// ids: text ids in [0, V) and the image's layout ids (VisionToken); visual: one embedding per
// IMAGE position [IMAGE positions, d], in layout order.
ModelRun run_model(const ModelConfig& m, const ModelWeights& w, const std::vector<int32_t>& ids,
                   const Tensor<float>& visual, const RunOptions& opt);

}  // namespace tandem
