#pragma once
// Byte model of the end-to-end model (optimized/model.hpp), launch by launch, composed from the
// components' models in the order run_model launches; must equal the emulator's counts exactly.
#include <cstdint>
#include <vector>

#include "core/model_config.hpp"
#include "problem/traffic.hpp"
#include "sim/kvcache_traffic.hpp"

namespace tandem::sim {

// A chunk of `ids` (text ids and the image's layout ids) appended at position `start`
// (OptimizedModel::append; start 0: a prompt from an empty cache).
LaunchLog predict_model(const ModelConfig& m, const std::vector<int32_t>& ids, int64_t start);
// Block b's attention site for a chunk of T tokens at `start`: the window's records (owners),
// the compressor (kv sources: prefill kernels at start 0, else a decode step per token), the new
// entries' index keys, queries, scores and top-k (index sources), the queries, sparse
// attention, the output projection.
LaunchLog predict_model_attention(const ModelConfig& m, int b, int64_t T, int64_t start);
// The attention's LoRAs over T tokens (optimized/block_runner.hpp), shared with DSpark's stages:
// the query latent (W_qa at width d, its norm), the queries (W_qb, the per-head norm, RoPE), the
// output (W_oa by groups, W_ob back to d).
LaunchLog predict_query_latent(int64_t T, int64_t d, const AttentionLora& l);
LaunchLog predict_head_queries(int64_t T, int64_t heads, const AttentionLora& l);
LaunchLog predict_output_lora(int64_t T, int64_t heads, int64_t d, const AttentionLora& l);
// The logits of T rows of width d over a vocabulary of V: a dense_rows launch per
// kUnembedChunkRows rows of the unembedding (optimized/block_runner.hpp), shared with DSpark's
// head.
LaunchLog predict_unembed(int64_t T, int64_t d, int64_t V);
// How block b picks the compressed entries it reads: window only (ratio 0), its own top-k (an
// index source), the last index source's selection (the others).
KvSelection model_block_selection(const ModelShape& s, int b);
// The model's layer mix as a release's cache description (core/release_config.hpp): a cache per
// ratio owned by its kv sources (window-only blocks own a ring), index keys where an index
// source reads it, an attention kind per block; its name, window, top-k and record sizes (the
// rest of a release's fields are left unset).
ReleaseConfig model_as_release(const ModelConfig& m);

// run_image_embedding over a [grid_h, grid_w] patch grid.
LaunchLog predict_image_embedding(const ModelConfig& m, int64_t grid_h, int64_t grid_w);

}  // namespace tandem::sim
