#include "core/engram_config.hpp"

#include <algorithm>
#include <set>

#include "core/error.hpp"
#include "core/numpy_rng.hpp"

namespace tandem {
namespace {

uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m) {
  return static_cast<uint64_t>((unsigned __int128)a * b % m);
}

uint64_t powmod(uint64_t a, uint64_t e, uint64_t m) {
  uint64_t r = 1;
  for (a %= m; e; e >>= 1, a = mulmod(a, a, m))
    if (e & 1) r = mulmod(r, a, m);
  return r;
}

}  // namespace

// Deterministic Miller-Rabin for 64-bit n (these bases suffice below 3.3e24).
bool is_prime(uint64_t n) {
  if (n < 2) return false;
  for (uint64_t p : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37})
    if (n % p == 0) return n == p;
  uint64_t d = n - 1;
  int s = 0;
  while (d % 2 == 0) d /= 2, ++s;
  for (uint64_t a : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37}) {
    uint64_t x = powmod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int r = 1; r < s && composite; ++r) composite = (x = mulmod(x, x, n)) != n - 1;
    if (composite) return false;
  }
  return true;
}

std::vector<int64_t> engram_multipliers(uint64_t seed, int layer_id, int64_t compressed_vocab,
                                        int max_order) {
  const int64_t half = std::max<int64_t>(1, (INT64_MAX / compressed_vocab) / 2);
  std::vector<int64_t> m =
      numpy_integers(seed + 10007ull * static_cast<uint64_t>(layer_id), half, max_order);
  for (int64_t& v : m) v = 2 * v + 1;
  return m;
}

std::vector<EngramLayerTables> engram_tables(const EngramConfig& c) {
  std::vector<EngramLayerTables> layers;
  std::set<int64_t> used;
  for (size_t li = 0; li < c.layer_ids.size(); ++li) {
    EngramLayerTables t;
    t.layer_id = c.layer_ids[li];
    t.multipliers = c.multipliers.empty()
                        ? engram_multipliers(c.seed, t.layer_id, c.compressed_vocab, c.max_order)
                        : c.multipliers[li];
    for (int order = 2; order <= c.max_order; ++order) {
      int64_t start = c.table_base - 1;
      for (int head = 0; head < c.heads; ++head) {
        int64_t p = start + 1;
        while (!is_prime(static_cast<uint64_t>(p)) || used.count(p)) ++p;
        used.insert(p);
        t.offsets.push_back(t.rows);
        t.primes.push_back(p);
        t.rows += p;
        start = p;
      }
    }
    layers.push_back(std::move(t));
  }
  return layers;
}

void check_engram_table_bytes(const EngramLayerTables& t, const EngramConfig& c) {
  const double bytes = double(t.rows) * c.row_bytes();
  if (bytes > kMaxWorkingBytes)
    throw_bad_input(
        "engram.table_base = {}: layer {}'s tables hold {} rows of {} bytes ({:.3g} GB), over the "
        "{:.3g} GB a run may allocate (the release's full tables are not allocated here)",
        c.table_base, t.layer_id, t.rows, c.row_bytes(), bytes / 1e9, kMaxWorkingBytes / 1e9);
}

EngramConfig parse_engram_layout(const JsonFields& f) {
  EngramConfig c;
  const auto& ids = f.array("layer_ids");
  if (ids.empty())
    throw_bad_input("{}: expected a non-empty array of layer ids", f.where("layer_ids"));
  if (ids.size() > kMaxEngramLayers)
    throw_bad_input("{}: {} layer ids, at most {}", f.where("layer_ids"), ids.size(),
                    kMaxEngramLayers);
  c.layer_ids.clear();
  for (const auto& v : ids) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 100000)
      throw_bad_input("{}: layer ids are integers in [0, 100000], got {}", f.where("layer_ids"),
                      brief(v));
    c.layer_ids.push_back(v.get<int>());
  }
  c.max_order = static_cast<int>(f.integer("max_order", 2, 4));
  c.heads = static_cast<int>(f.integer("heads", 1, 8));
  c.head_dim = static_cast<int>(f.integer("head_dim", 256, 256));  // the kernels' row layout
  c.table_base = f.integer("table_base", 2, int64_t{1} << 40);
  c.vocab = f.integer("vocab", 1, int64_t{1} << 31);
  c.compressed_vocab = f.integer("compressed_vocab", 3, int64_t{1} << 31);
  c.pad_id = f.integer("pad_id", 0, c.vocab - 1);
  // The compression map the rows build: 8 bytes a vocabulary id.
  f.within_budget("vocab", 8.0 * double(c.vocab), 0);
  return c;
}

EngramConfig parse_engram_config(const JsonFields& f) {
  f.reject_unknown({"layer_ids", "max_order", "heads", "head_dim", "table_base", "vocab",
                    "compressed_vocab", "pad_id", "seed", "multipliers", "d", "norm_eps", "tokens",
                    "skip_marker_lookups", "wkv_fp8_block"});
  EngramConfig c = parse_engram_layout(f);
  c.seed = f.unsigned_integer("seed");
  // The multipliers draw from default_rng(seed + 10007 * layer): Python's integers do not wrap,
  // so a sum past 2^64 - 1 (which this entropy encoding cannot hold) is refused.
  const uint64_t top_layer = uint64_t(*std::max_element(c.layer_ids.begin(), c.layer_ids.end()));
  if (c.seed > UINT64_MAX - 10007 * top_layer)
    throw_bad_input(
        "{}: {} + 10007 x layer {} exceeds 2^64 - 1 (numpy would seed with the exact "
        "sum)",
        f.where("seed"), c.seed, top_layer);
  // The gate kernel's shared memory (engram_gate_shared_bytes) bounds d: d <= 10,248 with 24
  // lookups of 256 (the memory budget below binds first there), 11,096 with 8.
  c.d = static_cast<int>(f.integer("d", 8, 1 << 16));
  if (c.d % 8) throw_bad_input("{}: must be a multiple of 8, got {}", f.where("d"), c.d);
  const int64_t E = int64_t{c.lookups()} * c.head_dim;
  const size_t smem = engram_gate_shared_bytes(E, c.d);
  if (!engram_gate_fits(E, c.d))
    throw_bad_input(
        "{}: {} with {} lookups of {} needs {} B of shared memory in the gate kernel, past the "
        "{} B a block can have",
        f.where("d"), c.d, c.lookups(), c.head_dim, smem + kEngramGateStaticShared,
        kMaxDynamicShared);
  c.norm_eps = f.number("norm_eps", 0.0, 1e-2);
  c.tokens = static_cast<int>(f.integer("tokens", 1, 1 << 20));
  if (f.has("skip_marker_lookups")) c.skip_marker_lookups = f.boolean("skip_marker_lookups");
  if (f.has("wkv_fp8_block")) {
    c.wkv_fp8_block = static_cast<int>(f.integer("wkv_fp8_block", 0, 128));
    if (c.wkv_fp8_block != 0 && c.wkv_fp8_block != 32 && c.wkv_fp8_block != 128)
      throw_bad_input("{}: 32 (V4.1), 128 (V4) or 0 (unquantized), got {}",
                      f.where("wkv_fp8_block"), c.wkv_fp8_block);
  }
  if (f.has("multipliers")) {
    const auto& m = f.array("multipliers");
    if (m.size() != c.layer_ids.size())
      throw_bad_input("{}: one array per layer id expected", f.where("multipliers"));
    const int64_t bound = INT64_MAX / c.compressed_vocab;  // c * m must not overflow
    for (const auto& layer : m) {
      if (!layer.is_array() || layer.size() != static_cast<size_t>(c.max_order))
        throw_bad_input("{}: each layer needs max_order = {} values", f.where("multipliers"),
                        c.max_order);
      std::vector<int64_t> v;
      for (const auto& x : layer) {
        if (!x.is_number_integer() || x.get<int64_t>() <= 0 || x.get<int64_t>() % 2 == 0 ||
            x.get<int64_t>() > bound)
          throw_bad_input("{}: multipliers are odd integers in [1, {}], got {}",
                          f.where("multipliers"), bound, brief(x));
        v.push_back(x.get<int64_t>());
      }
      c.multipliers.push_back(v);
    }
  }
  // The hidden states and gathered rows of every token, a layer's Wkv [5d, lookups x head_dim]
  // as the rows hold it (double reference, floats, FP8 codes and scales: measured 12.7 bytes a
  // value at d 5120, 16.8 at 10248) and the compression map (8 bytes a vocabulary id); the work
  // is the lookups' projection to d, per layer. (The tables themselves are checked where they
  // are allocated: check_engram_table_bytes.)
  const double T = c.tokens, width = double(c.lookups()) * c.head_dim;
  f.within_budget("tokens x layer_ids x heads x d",
                  64 * T * (4.0 * c.d + width) + 16 * 5.0 * c.d * width + 8.0 * double(c.vocab),
                  4 * T * double(c.layer_ids.size()) * width * c.d);
  return c;
}

nlohmann::json to_json(const EngramConfig& c) {
  nlohmann::json j = {{"layer_ids", c.layer_ids},
                      {"max_order", c.max_order},
                      {"heads", c.heads},
                      {"head_dim", c.head_dim},
                      {"table_base", c.table_base},
                      {"vocab", c.vocab},
                      {"compressed_vocab", c.compressed_vocab},
                      {"pad_id", c.pad_id},
                      {"seed", c.seed},
                      {"d", c.d},
                      {"norm_eps", c.norm_eps},
                      {"tokens", c.tokens},
                      {"skip_marker_lookups", c.skip_marker_lookups},
                      {"wkv_fp8_block", c.wkv_fp8_block}};
  if (!c.multipliers.empty()) j["multipliers"] = c.multipliers;
  return j;
}

}  // namespace tandem
