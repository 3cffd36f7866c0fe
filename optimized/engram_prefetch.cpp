#include "optimized/engram_prefetch.hpp"

#include <vector>

#include "core/error.hpp"
#include "optimized/engram.hpp"

namespace tandem {

EngramAddressGenerator::EngramAddressGenerator(const EngramConfig& cfg, EngramLayerTables tables,
                                               int64_t compressed_pad)
    : cfg_(cfg), tables_(std::move(tables)), pad_(compressed_pad) {}

void EngramAddressGenerator::generate(std::span<const int64_t> compressed,
                                      std::span<const int64_t> history,
                                      std::span<int64_t> out) const {
  const size_t T = compressed.size(), L = cfg_.lookups();
  if (out.size() != T * L)
    throw_bad_input("engram addresses: output holds {}, needs {}", out.size(), T * L);
  if (history.size() > static_cast<size_t>(kEngramHistory))
    throw_bad_input("engram addresses: history has {} ids, at most {}", history.size(),
                    kEngramHistory);
  const std::vector<int64_t> ids = engram_ids_with_history(compressed, history);
  std::vector<int64_t> term(T), hash(T);
  std::vector<uint8_t> blocked(T, 0);
  for (int i = 0; i < cfg_.max_order; ++i) {
    // Lag i: the effective id (pad once any lag <= i was negative) times multiplier i.
    const int64_t m = tables_.multipliers[i];
    for (size_t t = 0; t < T; ++t) {
      const int64_t id = ids[kEngramHistory + t - i];
      blocked[t] |= id < 0;
      term[t] = (blocked[t] ? pad_ : id) * m;
      hash[t] = i == 0 ? term[t] : hash[t] ^ term[t];
    }
    if (i == 0) continue;
    const int order = i + 1;  // the hash now covers lags 0..i
    for (int j = 0; j < cfg_.heads; ++j) {
      const size_t l = static_cast<size_t>((order - 2) * cfg_.heads + j);
      const int64_t p = tables_.primes[l], offset = tables_.offsets[l];
      for (size_t t = 0; t < T; ++t)
        out[t * L + l] = compressed[t] < 0 && cfg_.skip_marker_lookups ? -1 : offset + hash[t] % p;
    }
  }
}

}  // namespace tandem
