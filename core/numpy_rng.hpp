#pragma once
// numpy's default_rng reproduced bit for bit: SeedSequence -> PCG64 (XSL-RR 128/64) -> bounded
// integers (Lemire), as numpy.random.default_rng(seed).integers(0, high, size, dtype=int64) draws
// them (numpy >= 1.17; checked against numpy 1.24 in properties/core/numpy_rng_props.cpp).
#include <cstdint>
#include <vector>

namespace tandem {

// SeedSequence(entropy).generate_state(n_words, uint32) with pool size 4 and no spawn key.
std::vector<uint32_t> seed_sequence_state(uint64_t entropy, int n_words);

class Pcg64 {
 public:
  explicit Pcg64(uint64_t seed);  // as numpy's PCG64(SeedSequence(seed))
  uint64_t next64();
  uint32_t next32();  // numpy's buffered halves: low word first, then the high word

 private:
  unsigned __int128 state_ = 0, inc_ = 0;
  bool has32_ = false;
  uint32_t buffered_ = 0;
};

// default_rng(seed).integers(0, high, size, dtype=int64) for high >= 1.
std::vector<int64_t> numpy_integers(uint64_t seed, int64_t high, int size);

}  // namespace tandem
