#include "sim/model_traffic.hpp"

#include <algorithm>

#include "sim/attention_traffic.hpp"
#include "sim/dense_traffic.hpp"
#include "sim/engram_traffic.hpp"
#include "sim/moe_traffic.hpp"
#include "sim/residual_traffic.hpp"
#include "sim/vision_traffic.hpp"

namespace tandem::sim {

LaunchLog predict_model(const ModelConfig& m, const std::vector<int32_t>& ids) {
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
      if (layer != b) continue;
      if (pending) log.push_back(predict_residual_boundary(T, d, f32, true, true, false, false));
      pending = false;
      add(predict_engram_layer(m.engram, T, markers, f32));
    }
    open(true);  // attention site: q/k/v, attention, o
    log.push_back(predict_dense_rows(T, d, 3 * d, f32));
    add(predict_attention(T, 0, d, f32));
    log.push_back(predict_dense_rows(T, d, d, f32));
    pending = true;
    open(true);  // MoE site: router, gate, experts
    log.push_back(predict_dense_rows(T, d, E, f32));
    log.push_back(predict_moe_gate(T, E, k));
    add(predict_moe_experts(T, d, H, k, f32));
    pending = true;
  }
  open(false);  // the head: collapse and norm
  log.push_back(predict_dense_rows(T, d, V, f32));
  return log;
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
