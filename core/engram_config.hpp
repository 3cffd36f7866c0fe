#pragma once
// Engram's configuration and its derived tables (DESIGN 5.2): per layer, the hash multipliers
// (numpy default_rng rule, or given), the primes of its (order, head) tables and their offsets.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/device_limits.hpp"
#include "core/json_fields.hpp"

namespace tandem {

// The Engram layers one config may name (the release uses a few).
inline constexpr size_t kMaxEngramLayers = 64;

struct EngramConfig {
  std::vector<int> layer_ids{1, 14};
  int max_order = 4;                 // n-gram orders 2..max_order
  int heads = 8;                     // hash heads per order
  int head_dim = 256;                // values per row (e4m3), one ue8m0 scale per 32
  int64_t table_base = 16000000;     // each order's prime search starts at table_base - 1
  int64_t vocab = 129280;            // tokenizer ids
  int64_t compressed_vocab = 99092;  // after the compression map
  int64_t pad_id = 2;                // read (compressed) before the sequence start
  uint64_t seed = 0;
  std::vector<std::vector<int64_t>> multipliers;  // optional: per layer, max_order odd values
  int d = 64;                                     // residual stream width (the gate)
  double norm_eps = 1e-6;
  int tokens = 16;  // tokens per verification case
  // The release hashes the all-pad n-gram at marker positions (image, DEAD) and fetches its rows
  // (the gate is 0 there); true skips those fetches (address -1, rows 0), an optimization whose
  // saving the traffic simulator reports.
  bool skip_marker_lookups = false;
  // Wkv as the release's FP8 linear: e4m3 weights with a ue8m0 scale per B x B block and the
  // input quantized per B values (V4.1 B = 32, V4 B = 128); 0: the unquantized variant.
  int wkv_fp8_block = 32;

  int orders() const { return max_order - 1; }
  int lookups() const { return orders() * heads; }
  int row_bytes() const { return head_dim + head_dim / 32; }
};

EngramConfig parse_engram_config(const JsonFields& f);
// The gate kernel's dynamic shared memory for E = lookups x head_dim inputs and width d: the
// looked-up rows e [E], their FP8 tile scales [E / 32] and kv = Wkv e [5d], as floats. With its
// static __shared__ (at most kEngramGateStaticShared) it must fit a block: a config is refused
// past kMaxDynamicShared - kEngramGateStaticShared (V4-Pro's d = 7168 at 24 lookups: 164.75 KiB).
inline size_t engram_gate_shared_bytes(int64_t E, int64_t d) {
  return sizeof(float) * size_t(E + E / 32 + 5 * d);
}
inline constexpr size_t kEngramGateStaticShared = 2048;
// Whether the gate kernel's dynamic and static shared memory fit one block.
inline bool engram_gate_fits(int64_t E, int64_t d) {
  return engram_gate_shared_bytes(E, d) + kEngramGateStaticShared <= kMaxDynamicShared;
}

// The layout fields alone (layer_ids, max_order, heads, head_dim, table_base, vocab,
// compressed_vocab, pad_id), the rest at their defaults; unknown keys are the caller's to refuse.
EngramConfig parse_engram_layout(const JsonFields& f);
nlohmann::json to_json(const EngramConfig& c);

struct EngramLayerTables {
  int layer_id = 0;
  std::vector<int64_t> multipliers;  // [max_order], odd
  std::vector<int64_t> primes;       // [lookups]: order-major, then head
  std::vector<int64_t> offsets;      // [lookups]: exclusive running sum of primes
  int64_t rows = 0;                  // sum of primes
};

// Walks layers in order, then orders, then heads; each takes the next prime above the running
// start that no earlier table (any layer) used; each order's search starts at table_base - 1.
std::vector<EngramLayerTables> engram_tables(const EngramConfig& c);
// Refuses (BadInput naming engram.table_base) a layer's tables larger than kMaxWorkingBytes,
// before anything allocates them.
void check_engram_table_bytes(const EngramLayerTables& t, const EngramConfig& c);
// The official multiplier rule: default_rng(seed + 10007 * layer).integers(0, half, max_order),
// half = max(1, (INT64_MAX // compressed_vocab) // 2); multiplier = 2r + 1.
std::vector<int64_t> engram_multipliers(uint64_t seed, int layer_id, int64_t compressed_vocab,
                                        int max_order);
bool is_prime(uint64_t n);

}  // namespace tandem
