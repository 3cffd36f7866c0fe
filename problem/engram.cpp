#include "problem/engram.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/tensor_checks.hpp"

namespace tandem {

void check_engram_wkv(const EngramInputs& in) {
  const int64_t d = in.cfg.d, E = int64_t{in.cfg.lookups()} * in.cfg.head_dim;
  if (!in.wkv || in.wkv->shape != Shape{5 * d, E})
    throw_bad_input("engram input 'wkv': expected [{}, {}]", 5 * d, E);
}

void validate_engram_inputs(const EngramInputs& in) {
  const EngramConfig& c = in.cfg;
  const int64_t T = static_cast<int64_t>(in.compressed.size()), d = c.d;
  const int64_t E = int64_t{c.lookups()} * c.head_dim;
  if (T < 1) throw_bad_input("engram input: no tokens");
  if (c.head_dim != 256 || c.lookups() > 24 || c.max_order > 4)
    throw_bad_input("engram config: the kernels need head_dim 256, max_order <= 4, <= 24 lookups");
  if (in.history.size() > static_cast<size_t>(kEngramHistory))
    throw_bad_input("engram input: history has {} ids, at most {}", in.history.size(),
                    kEngramHistory);
  for (int64_t id : in.compressed)
    if (id >= c.compressed_vocab)
      throw_bad_input("engram input: compressed id {} >= engram.compressed_vocab {}", id,
                      c.compressed_vocab);
  const int64_t rows = in.table_rows.empty() ? in.tables.rows : int64_t(in.table_rows.size());
  if (static_cast<int64_t>(in.table.size()) != rows * c.row_bytes())
    throw_bad_input("engram input: table has {} bytes, {} rows x {} B expected", in.table.size(),
                    rows, c.row_bytes());
  // A table is data: a NaN code (e4m3 0x7f / 0xff, ue8m0 0xff) or a scale past 2^119 (448 x
  // 2^120 overflows float) is bad input: its rows would not even decode to finite floats. (Huge
  // finite rows can still overflow the gate's float sums: a failing row, not bad input.)
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = in.table.data() + r * c.row_bytes();
    for (int at = 0; at < c.row_bytes(); ++at) {
      const bool scale = at >= c.head_dim;
      if (scale ? row[at] > kEngramMaxScaleCode : (row[at] & 0x7f) == 0x7f)
        throw_bad_input("engram input 'table': row {} byte {} is {} (0x{:02x})", r, at,
                        scale ? "a ue8m0 scale past 2^119 (or NaN)" : "a NaN e4m3 code", row[at]);
    }
  }
  check_engram_table_rows(in.table_rows, in.tables.rows);
  if (in.h.shape != Shape{T, 4, d}) throw_bad_input("engram input 'h': expected [{}, 4, {}]", T, d);
  check_engram_wkv(in);
  if (in.gate_w.shape != Shape{4, d}) throw_bad_input("engram input 'gate_w': expected [4, {}]", d);
  // Weights are data: a non-finite one is bad input (the FP8 quantizer would clamp a NaN to -448).
  for (const auto& [name, w] : {std::pair<const char*, const Tensor<float>*>{"wkv", in.wkv.get()},
                                std::pair{"gate_w", &in.gate_w}})
    require_finite(*w, "engram input", name);
  if (c.wkv_fp8_block != 0 && c.wkv_fp8_block != 32 && c.wkv_fp8_block != 128)
    throw_bad_input("engram config: wkv_fp8_block is 32, 128 or 0, got {}", c.wkv_fp8_block);
  if (!engram_gate_fits(E, d))
    throw_bad_input(
        "engram config: lookups x 256 x 33/32 + 5d floats ({} B) and the gate kernel's static "
        "shared memory exceed the {} B a block can have (d = {})",
        engram_gate_shared_bytes(E, d), kMaxDynamicShared, d);
}

void check_engram_table_rows(std::span<const int64_t> rows, int64_t table_rows) {
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i] < (i ? rows[i - 1] + 1 : 0) || rows[i] >= table_rows)
      throw_bad_input(
          "engram input 'table_rows'[{}] is {}: expected strictly ascending addresses in [0, {})",
          i, rows[i], table_rows);
}

const uint8_t* engram_table_row(const EngramInputs& in, int64_t address, int64_t token,
                                int lookup) {
  if (in.table_rows.empty()) return in.table.data() + address * in.cfg.row_bytes();
  const auto it = std::lower_bound(in.table_rows.begin(), in.table_rows.end(), address);
  if (it == in.table_rows.end() || *it != address)
    throw_bad_input(
        "engram input 'table_rows': token {} lookup {} reads row {}, which is not among the {} "
        "sampled rows",
        token, lookup, address, in.table_rows.size());
  return in.table.data() + (it - in.table_rows.begin()) * in.cfg.row_bytes();
}

}  // namespace tandem
