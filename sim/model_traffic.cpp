#include "sim/model_traffic.hpp"

#include <algorithm>

#include "problem/model.hpp"
#include "sim/dense_traffic.hpp"
#include "sim/engram_traffic.hpp"
#include "sim/indexer_traffic.hpp"
#include "sim/kvcache_traffic.hpp"
#include "sim/moe_traffic.hpp"
#include "sim/residual_traffic.hpp"
#include "sim/sparse_attn_traffic.hpp"
#include "sim/vision_traffic.hpp"

namespace tandem::sim {

LaunchLog predict_query_latent(int64_t T, int64_t d, const AttentionLora& l) {
  return {predict_dense_rows(T, d, l.q_rank, ActDType::f32),
          predict_rms_norm_rows(T, l.q_rank, ActDType::f32)};
}
LaunchLog predict_head_queries(int64_t T, int64_t heads, const AttentionLora& l) {
  return {predict_dense_rows(T, l.q_rank, heads * kKvMainDims, ActDType::f32),
          predict_rms_norm_rows(T * heads, kKvMainDims, ActDType::f32, false),
          predict_rope_queries(T, heads, kKvMainDims)};
}
LaunchLog predict_output_lora(int64_t T, int64_t heads, int64_t d, const AttentionLora& l) {
  const int64_t latent = int64_t{l.o_groups} * l.o_rank;
  return {
      predict_dense_rows(T, heads * kKvMainDims, latent, ActDType::f32, false, false, l.o_groups),
      predict_dense_rows(T, latent, d, ActDType::f32)};
}

LaunchLog predict_model_attention(const ModelConfig& m, int b, int64_t T, int64_t start) {
  constexpr ActDType f32 = ActDType::f32;
  const ModelShape& s = m.shape;
  const int64_t d = m.residual.d, H = s.heads, ih = s.index_heads;
  const int ratio = s.compress_ratios[size_t(b)];
  // Entries of block b's cache before and after the chunk (its source's: same ratio).
  const int64_t before = ratio > 0 ? kv_entries(start, ratio) : 0;
  const int64_t N = ratio > 0 ? kv_entries(start + T, ratio) : 0;
  LaunchLog log;
  auto add = [&](const LaunchLog& l) { log.insert(log.end(), l.begin(), l.end()); };
  if (s.kv_source(b) == b) {
    add(predict_kv_window_store(KvFormat::v41_window, T, d));
    if (ratio > 0 && start == 0) add(predict_kv_compress(v41_compressor(ratio), T, d, false));
    for (int64_t t = 0; ratio > 0 && start > 0 && t < T; ++t)
      add(predict_kv_compress(v41_compressor(ratio), 1, d, true, start + t));
  }
  add(predict_query_latent(T, d, s.lora));
  if (s.is_index_source(b)) {
    if (N > before) add(predict_index_key_store(KvFormat::idx_mxfp4, N - before));
    log.push_back(predict_dense_rows(T, s.lora.q_rank, ih * kIndexKeyDims, f32));
    log.push_back(predict_rope_queries(T, ih, kIndexKeyDims));
    add(predict_kv_quantize(KvFormat::idx_mxfp4, T * ih, Traffic::activation));
    log.push_back(predict_dense_rows(T, d, ih, f32));
    if (N > 0) {
      log.push_back(predict_index_logits(KvFormat::idx_mxfp4, T, int(ih), N, ratio, start));
      std::vector<int32_t> lengths;
      for (int64_t t = 0; t < T; ++t)
        lengths.push_back(int32_t(visible_entries(start + t, ratio, N)));
      log.push_back(predict_topk_select(lengths, s.index_topk));
    }
  }
  add(predict_head_queries(T, H, s.lora));
  // Sparse attention's bytes follow which indices are valid: the window's, and the selection's
  // (min(top-k, visible entries) per token, the rest -1).
  SparseAttnInputs in;
  in.heads = int(H);
  in.q.shape = {T, H, kKvMainDims};
  in.window = model_store_options(KvFormat::v41_window, start + T, 0);
  in.comp = model_store_options(KvFormat::v41_fp4, N, 0);
  in.window_idx = model_window_indices(start, T, s.window, start + T);
  in.comp_idx = Tensor<int32_t>({T, ratio > 0 ? s.index_topk : 0}, -1);
  for (int64_t t = 0; ratio > 0 && t < T; ++t)
    for (int64_t k = 0; k < std::min<int64_t>(s.index_topk, visible_entries(start + t, ratio, N));
         ++k)
      in.comp_idx.data[size_t(t * s.index_topk + k)] = 0;
  log.push_back(predict_sparse_attn(in));
  add(predict_output_lora(T, H, d, s.lora));
  return log;
}

LaunchLog predict_model(const ModelConfig& m, const std::vector<int32_t>& ids, int64_t start) {
  constexpr ActDType f32 = ActDType::f32;
  const int64_t T = int64_t(ids.size()), d = m.residual.d, E = m.vision.experts;
  const int64_t k = m.vision.top_k, H = m.shape.ffn_hidden, V = m.engram.vocab;
  const int64_t markers = std::count_if(ids.begin(), ids.end(), [](int32_t id) { return id < 0; });
  LaunchLog log;
  auto add = [&](const LaunchLog& l) { log.insert(log.end(), l.begin(), l.end()); };
  bool pending = false, carried = false;  // a site's f waits to be applied; a pre to carry
  auto open = [&](bool mixes) {
    log.push_back(predict_residual_boundary(T, d, f32, pending, carried, true, mixes));
    pending = false, carried = true;
  };
  for (int b = 0; b < m.shape.blocks; ++b) {
    for (int layer : m.engram.layer_ids) {
      if (m.shape.block_of_layer(layer) != b) continue;
      if (pending) log.push_back(predict_residual_boundary(T, d, f32, true, true, false, false));
      pending = false;
      add(predict_engram_layer(m.engram, T, markers, f32));
    }
    open(true);  // attention site over the compressed cache
    add(predict_model_attention(m, b, T, start));
    pending = true;
    open(true);  // MoE site: router, gate, experts
    log.push_back(predict_dense_rows(T, d, E, f32));
    log.push_back(predict_moe_gate(T, E, k, m.shape.hashes(b) ? T - markers : 0));
    add(predict_moe_experts(T, d, H, k + 1, f32));  // + the shared expert
    pending = true;
  }
  open(false);  // the head: collapse and norm, then the unembedding chunk by chunk
  add(predict_unembed(T, d, V));
  return log;
}

LaunchLog predict_unembed(int64_t T, int64_t d, int64_t V) {
  LaunchLog log;
  for (int64_t first = 0; first < V; first += kUnembedChunkRows)
    log.push_back(predict_dense_rows(T, d, std::min(kUnembedChunkRows, V - first), ActDType::f32));
  return log;
}

KvSelection model_block_selection(const ModelShape& s, int b) {
  if (s.compress_ratios[size_t(b)] == 0) return KvSelection::window;
  if (s.is_index_source(b)) return KvSelection::scan;
  return s.index_source(b) >= 0 ? KvSelection::reuse : KvSelection::window;
}

ReleaseConfig model_as_release(const ModelConfig& m) {
  const ModelShape& s = m.shape;
  ReleaseConfig r;
  r.name = m.name;
  r.window = s.window;
  r.window_record_bytes = kv_format_info(KvFormat::v41_window).record_bytes();
  r.index_top_k = s.index_topk;
  for (int b = 0; b < s.blocks; ++b) {
    const int ratio = s.compress_ratios[size_t(b)];
    const KvSelection how = model_block_selection(s, b);
    auto kind = std::find_if(r.attention.begin(), r.attention.end(), [&](const AttentionLayers& a) {
      return a.ratio == ratio && a.selection == how;
    });
    if (kind == r.attention.end()) kind = r.attention.insert(kind, {ratio, 0, how});
    ++kind->layers;
    auto cache = std::find_if(r.kv_caches.begin(), r.kv_caches.end(),
                              [&](const KvCacheLayers& k) { return k.ratio == ratio; });
    if (s.kv_source(b) == b) {  // a consumer reads its source's cache (before it: listed)
      if (cache == r.kv_caches.end())
        cache = r.kv_caches.insert(
            cache, {ratio, 0, ratio > 0 ? kv_format_info(KvFormat::v41_fp4).record_bytes() : 0, 0});
      ++cache->layers;
    }
    if (s.is_index_source(b))  // its cache keeps index keys
      cache->index_key_bytes = kv_format_info(KvFormat::idx_mxfp4).record_bytes();
  }
  return r;
}

LaunchLog predict_image_embedding(const ModelConfig& m, int64_t grid_h, int64_t grid_w) {
  constexpr ActDType f32 = ActDType::f32;
  constexpr int64_t kPatchValues = 3 * 14 * 14;
  const int64_t C = m.vision.width, d = m.residual.d;
  const int64_t tokens = ((grid_h + 2) / 3) * ((grid_w + 2) / 3);
  LaunchLog log{predict_dense_rows(grid_h * grid_w, kPatchValues, C, f32)};
  const LaunchLog unshuffle = predict_unshuffle(grid_h, grid_w, C, f32);
  log.insert(log.end(), unshuffle.begin(), unshuffle.end());
  log.push_back(predict_dense_rows(tokens, 9 * C, 2 * d, f32, true, true));
  log.push_back(predict_dense_rows(tokens, 2 * d, d, f32, true, false));
  return log;
}

}  // namespace tandem::sim
