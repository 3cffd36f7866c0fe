#pragma once
// Philox-4x32-10 (Salmon et al., SC'11), counter-based: the same (key, counter) gives the same
// four words on the host, the GPU and the emulator. Keys follow DESIGN section 4:
// key = seed, counter = (request, position, stream, 0).
#include <cstdint>

#include "core/hd.hpp"

namespace tandem {

struct Philox4 {
  uint32_t v[4];
};

TANDEM_HD inline void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// The round's multipliers and the key's Weyl increments.
inline constexpr uint32_t kPhiloxMul0 = 0xD2511F53u, kPhiloxMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxWeyl0 = 0x9E3779B9u, kPhiloxWeyl1 = 0xBB67AE85u;
inline constexpr int kPhiloxRounds = 10;

TANDEM_HD inline Philox4 philox4x32_10(Philox4 ctr, uint32_t key0, uint32_t key1) {
  for (int round = 0; round < kPhiloxRounds; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kPhiloxMul0, ctr.v[0], hi0, lo0);
    philox_mulhilo(kPhiloxMul1, ctr.v[2], hi1, lo1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
    key0 += kPhiloxWeyl0;
    key1 += kPhiloxWeyl1;
  }
  return ctr;
}

// A uniform float in [0, 1) from the top 24 bits of a word (exactly representable).
TANDEM_HD inline float philox_uniform(uint32_t word) { return (word >> 8) * (1.0f / 16777216.0f); }

// The draws keyed by (seed, request, position): DESIGN section 4.
TANDEM_HD inline Philox4 philox_draw(uint64_t seed, uint32_t request, uint32_t position,
                                     uint32_t stream = 0) {
  return philox4x32_10(Philox4{{request, position, stream, 0}}, static_cast<uint32_t>(seed),
                       static_cast<uint32_t>(seed >> 32));
}

}  // namespace tandem
