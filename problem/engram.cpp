#include "problem/engram.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/error.hpp"

namespace tandem {

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
  if (static_cast<int64_t>(in.table.size()) != in.tables.rows * c.row_bytes())
    throw_bad_input("engram input: table has {} bytes, {} rows x {} B expected", in.table.size(),
                    in.tables.rows, c.row_bytes());
  if (in.h.shape != Shape{T, 4, d}) throw_bad_input("engram input 'h': expected [{}, 4, {}]", T, d);
  if (in.wkv.shape != Shape{5 * d, E})
    throw_bad_input("engram input 'wkv': expected [{}, {}]", 5 * d, E);
  if (in.gate_w.shape != Shape{4, d}) throw_bad_input("engram input 'gate_w': expected [4, {}]", d);
  if (c.wkv_fp8_block != 0 && c.wkv_fp8_block != 32 && c.wkv_fp8_block != 128)
    throw_bad_input("engram config: wkv_fp8_block is 32, 128 or 0, got {}", c.wkv_fp8_block);
  if (!engram_gate_fits(E, d))
    throw_bad_input(
        "engram config: lookups x 256 x 33/32 + 5d floats ({} B) and the gate kernel's static "
        "shared memory exceed the {} B a block can have (d = {})",
        engram_gate_shared_bytes(E, d), kMaxDynamicShared, d);
}

}  // namespace tandem
