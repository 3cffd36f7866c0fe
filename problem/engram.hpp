#pragma once
// The Engram layer as data (DESIGN 5.2): hashed n-gram addresses,
// gathered and dequantised FP8 rows, and the V4.1 gate on the 4 residual streams.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "core/engram_config.hpp"
#include "core/fp8_blocks.hpp"
#include "core/tensor.hpp"
#include "problem/dtype.hpp"
#include "problem/traffic.hpp"

namespace tandem {

inline constexpr int kEngramHistory = 3;    // ids before a chunk that its 4-grams can reach
inline constexpr int64_t kEngramDead = -1;  // the DEAD marker (also "before the sequence")
// The largest table scale (ue8m0 code) whose rows stay finite floats: 448 x 2^119 < FLT_MAX.
inline constexpr uint8_t kEngramMaxScaleCode = 127 + 119;

struct EngramInputs {
  EngramConfig cfg;
  ActDType act = ActDType::f32;
  EngramLayerTables tables;
  std::vector<int64_t> compressed;  // [T] compressed ids; negative: image / DEAD positions
  std::vector<int64_t> history;     // [<= 3] compressed ids before the chunk, oldest first
  int64_t compressed_pad = 0;       // the pad id, compressed with the same map
  std::vector<uint8_t> table;       // [rows, row_bytes]: head_dim e4m3 codes, then ue8m0 scales
  // Empty: `table` is the layer's whole table (row = address). Else the addresses of the rows
  // `table` holds, strictly ascending: a table far larger than the test sampled to the rows the
  // tokens read (the release's are ~384M rows, ~98 GB a layer), as a checkpoint's are read.
  std::vector<int64_t> table_rows;
  Tensor<float> h;  // [T, 4, d] residual streams (values of act)
  // [5d, lookups * head_dim]: 4 keys, then the value. Shared, never copied: 629 MB at V4.1's
  // widths, held once by the model's weights for every run and reference, and quantized to
  // block FP8 (cfg.wkv_fp8_block) once for all of them.
  std::shared_ptr<const Fp8CachedWeight> wkv;
  Tensor<float> gate_w;  // [4, d]
};

// An Engram layer's inputs as a golden case stores them: the raw token ids and the compression
// map they go through (the layer's compressed ids and pad id are derived from these), then the
// layer's stored inputs.
struct EngramStoredInputs {
  Tensor<int32_t> map;      // [vocab] compressed id of each raw id
  Tensor<int64_t> ids;      // [T] raw ids; negative: image / DEAD positions
  Tensor<int64_t> history;  // [<= 3] raw ids before the chunk, oldest first
  EngramInputs layer;       // its table, h and gate_w stored; the rest derived or config
  Tensor<float> wkv;        // layer.wkv as stored (the reader hands it to layer.wkv)
};

// Every stored tensor with its name (the golden blob's tensor names).
template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, EngramStoredInputs>
void for_each_tensor(Input& in, F&& f) {
  f("map", in.map);
  f("ids", in.ids);
  f("history", in.history);
  f("table", in.layer.table);
  f("h", in.layer.h);
  f("wkv", in.wkv);
  f("gate_w", in.layer.gate_w);
}

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
// BadInput naming 'wkv' unless it is held and shaped [5d, lookups x head_dim] (the shape check
// alone: validate_engram_inputs also scans its values).
void check_engram_wkv(const EngramInputs& in);
// BadInput naming 'table_rows' unless `rows` are strictly ascending addresses of a layer's
// `table_rows`-row table (EngramInputs::table_rows).
void check_engram_table_rows(std::span<const int64_t> rows, int64_t table_rows);

// Table row `address`'s bytes: row `address` of a whole table, or of a sampled one (table_rows
// non-empty) the row listed with that address; BadInput naming 'table_rows' when a sampled table
// lacks it (`where`: which token and lookup asked).
const uint8_t* engram_table_row(const EngramInputs& in, int64_t address, int64_t token, int lookup);

}  // namespace tandem
