#pragma once
// Host-side Engram address generation for the prefetch path (DESIGN 5.2): addresses depend on
// token ids only, so the host computes a whole chunk's rows before the hidden state exists and
// starts copying them while the first block runs. Struct-of-arrays loops over positions:
// branch-free lag selection, one multiply/xor sweep per order, one modulo sweep per head.
#include <cstdint>
#include <span>

#include "core/engram_config.hpp"

namespace tandem {

class EngramAddressGenerator {
 public:
  EngramAddressGenerator(const EngramConfig& cfg, EngramLayerTables tables, int64_t compressed_pad);
  // out: [T, lookups] row-major; at a negative id the all-pad n-gram's rows (-1 with
  // cfg.skip_marker_lookups). history: <= 3 ids.
  void generate(std::span<const int64_t> compressed, std::span<const int64_t> history,
                std::span<int64_t> out) const;

 private:
  EngramConfig cfg_;
  EngramLayerTables tables_;
  int64_t pad_;
};

}  // namespace tandem
