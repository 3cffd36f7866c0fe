#pragma once
// The Engram layer as data (DESIGN 5.2): hashed n-gram addresses,
// gathered and dequantised FP8 rows, and the V4.1 gate on the 4 residual streams.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "core/engram_config.hpp"
#include "core/tensor.hpp"
#include "problem/dtype.hpp"
#include "problem/traffic.hpp"

namespace tandem {

inline constexpr int kEngramHistory = 3;    // ids before a chunk that its 4-grams can reach
inline constexpr int64_t kEngramDead = -1;  // the DEAD marker (also "before the sequence")

struct EngramInputs {
  EngramConfig cfg;
  ActDType act = ActDType::f32;
  EngramLayerTables tables;
  std::vector<int64_t> compressed;  // [T] compressed ids; negative: image / DEAD positions
  std::vector<int64_t> history;     // [<= 3] compressed ids before the chunk, oldest first
  int64_t compressed_pad = 0;       // the pad id, compressed with the same map
  std::vector<uint8_t> table;       // [rows, row_bytes]: head_dim e4m3 codes, then ue8m0 scales
  Tensor<float> h;                  // [T, 4, d] residual streams (values of act)
  Tensor<float> wkv;                // [5d, lookups * head_dim]: 4 keys, then the value
  Tensor<float> gate_w;             // [4, d]
};

struct EngramOutputs {
  Tensor<int64_t> addresses;  // [T, lookups]; -1 where no lookup (markers, when skipped)
  Tensor<float> rows;         // [T, lookups * head_dim] dequantised (0 where no lookup)
  Tensor<float> gates;        // [T, 4]
  Tensor<float> h_out;        // [T, 4, d]
  LaunchLog launches;
};

// The chunk's ids behind 3 slots of history (DEAD where there is none): index 3 + t is c_t, so
// position t reads its n-gram at 3 + t - i for lags i = 0..3.
inline std::vector<int64_t> engram_ids_with_history(std::span<const int64_t> compressed,
                                                    std::span<const int64_t> history) {
  std::vector<int64_t> ids(kEngramHistory, kEngramDead);
  std::copy_backward(history.begin(), history.end(), ids.end());
  ids.insert(ids.end(), compressed.begin(), compressed.end());
  return ids;
}

void validate_engram_inputs(const EngramInputs& in);

}  // namespace tandem
