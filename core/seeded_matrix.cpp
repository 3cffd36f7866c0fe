#include "core/seeded_matrix.hpp"

#include "core/error.hpp"

namespace tandem {
namespace {

// Words for counters first .. first + n - 1, kLanes at a time: philox_draw's rounds lane by
// lane, which the compiler turns into vector multiplies (32 lanes: two AVX-512 registers of
// 64-bit products per multiplier; 16 lanes left the AVX-512 build at half this speed).
[[gnu::always_inline]] inline void philox_words(uint64_t seed, uint32_t stream, uint64_t first,
                                                int64_t n, uint32_t* out) {
  constexpr int kLanes = 32;
  for (int64_t done = 0; done < n; done += kLanes) {
    uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];  // philox_draw's counter words
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t i = first + uint64_t(done + l);
      c0[l] = stream, c1[l] = uint32_t(i), c2[l] = uint32_t(i >> 32), c3[l] = 0;
    }
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int round = 0; round < kPhiloxRounds; ++round) {  // philox4x32_10's
      for (int l = 0; l < kLanes; ++l) {
        const uint64_t p0 = uint64_t{kPhiloxMul0} * c0[l], p1 = uint64_t{kPhiloxMul1} * c2[l];
        const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[l] ^ k0, n2 = uint32_t(p0 >> 32) ^ c3[l] ^ k1;
        c1[l] = uint32_t(p1), c3[l] = uint32_t(p0), c0[l] = n0, c2[l] = n2;
      }
      k0 += kPhiloxWeyl0, k1 += kPhiloxWeyl1;
    }
    const int64_t m = std::min<int64_t>(kLanes, n - done);
    std::copy_n(c0, m, out + done);
  }
}

void words_baseline(uint64_t seed, uint32_t stream, uint64_t first, int64_t n, uint32_t* out) {
  philox_words(seed, stream, first, n, out);
}
#if defined(__x86_64__)
[[gnu::target("avx2")]] void words_avx2(uint64_t seed, uint32_t stream, uint64_t first, int64_t n,
                                        uint32_t* out) {
  philox_words(seed, stream, first, n, out);
}
[[gnu::target("avx512f")]] void words_avx512(uint64_t seed, uint32_t stream, uint64_t first,
                                             int64_t n, uint32_t* out) {
  philox_words(seed, stream, first, n, out);
}
#endif

using WordsFn = void (*)(uint64_t, uint32_t, uint64_t, int64_t, uint32_t*);

WordsFn words_for(SeededIsa isa) {
  switch (isa) {
    case SeededIsa::baseline:
      return words_baseline;
#if defined(__x86_64__)
    case SeededIsa::avx2:
      return words_avx2;
    case SeededIsa::avx512:
      return words_avx512;
#endif
    default:
      throw_bad_input("seeded_words: this build has no generator for instruction set {}", int(isa));
  }
}

}  // namespace

std::vector<SeededIsa> seeded_isas() {
  std::vector<SeededIsa> isas{SeededIsa::baseline};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) isas.push_back(SeededIsa::avx2);
  if (__builtin_cpu_supports("avx512f")) isas.push_back(SeededIsa::avx512);
#endif
  return isas;
}

void seeded_words(uint64_t seed, uint32_t stream, uint64_t first, int64_t n, uint32_t* out,
                  SeededIsa isa) {
  const std::vector<SeededIsa> runs = seeded_isas();
  if (std::find(runs.begin(), runs.end(), isa) == runs.end())
    throw_bad_input("seeded_words: this CPU does not run instruction set {}", int(isa));
  words_for(isa)(seed, stream, first, n, out);
}

void seeded_words(uint64_t seed, uint32_t stream, uint64_t first, int64_t n, uint32_t* out) {
  static const WordsFn best = words_for(seeded_isas().back());
  best(seed, stream, first, n, out);
}

}  // namespace tandem
