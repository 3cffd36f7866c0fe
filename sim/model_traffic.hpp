#pragma once
// Byte model of the end-to-end model (optimized/model.hpp), launch by launch, composed from the
// components' models in the order run_model launches; must equal the emulator's counts exactly.
#include <cstdint>
#include <vector>

#include "core/model_config.hpp"
#include "problem/traffic.hpp"

namespace tandem::sim {

// One prompt of `ids` (text ids and the image's layout ids) from an empty cache.
LaunchLog predict_model(const ModelConfig& m, const std::vector<int32_t>& ids);
// Block b's attention site in a prefill of T tokens: the window's records (owners), the
// compressor (kv sources), the index keys, queries, scores and top-k (index sources), the
// queries, sparse attention, the output projection.
LaunchLog predict_model_attention(const ModelConfig& m, int b, int64_t T);
// run_image_embedding over a [grid_h, grid_w] patch grid.
LaunchLog predict_image_embedding(const ModelConfig& m, int64_t grid_h, int64_t grid_w);

}  // namespace tandem::sim
