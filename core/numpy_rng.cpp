#include "core/numpy_rng.hpp"

#include "core/error.hpp"

namespace tandem {
namespace {

constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd,
                   kMultB = 0x58f38ded, kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kXShift = 16, kPoolSize = 4;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  return value ^ (value >> kXShift);
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixMultL * x - kMixMultR * y;
  return r ^ (r >> kXShift);
}

// The entropy as numpy coerces an int: little-endian 32-bit words ([0] for 0).
std::vector<uint32_t> entropy_words(uint64_t entropy) {
  std::vector<uint32_t> w;
  do {
    w.push_back(static_cast<uint32_t>(entropy));
    entropy >>= 32;
  } while (entropy);
  return w;
}

unsigned __int128 u128(uint64_t hi, uint64_t lo) { return (unsigned __int128)hi << 64 | lo; }

const unsigned __int128 kPcgMultiplier = u128(0x2360ED051FC65DA4ull, 0x4385DF649FCCF645ull);

}  // namespace

std::vector<uint32_t> seed_sequence_state(uint64_t entropy, int n_words) {
  const std::vector<uint32_t> ent = entropy_words(entropy);
  uint32_t pool[kPoolSize];
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i)
    pool[i] = hashmix(i < static_cast<int>(ent.size()) ? ent[i] : 0, hash_const);
  for (int src = 0; src < kPoolSize; ++src)
    for (int dst = 0; dst < kPoolSize; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hash_const));
  for (size_t src = kPoolSize; src < ent.size(); ++src)
    for (int dst = 0; dst < kPoolSize; ++dst)
      pool[dst] = mix(pool[dst], hashmix(ent[src], hash_const));
  std::vector<uint32_t> state(n_words);
  uint32_t hc = kInitB;
  for (int i = 0; i < n_words; ++i) {
    uint32_t v = pool[i % kPoolSize] ^ hc;
    hc *= kMultB;
    v *= hc;
    state[i] = v ^ (v >> kXShift);
  }
  return state;
}

Pcg64::Pcg64(uint64_t seed) {
  // generate_state(4, uint64): pairs of 32-bit words, low word first.
  const std::vector<uint32_t> w = seed_sequence_state(seed, 8);
  uint64_t v[4];
  for (int i = 0; i < 4; ++i) v[i] = uint64_t{w[2 * i]} | uint64_t{w[2 * i + 1]} << 32;
  const unsigned __int128 initstate = u128(v[0], v[1]), initseq = u128(v[2], v[3]);
  inc_ = initseq << 1 | 1;
  state_ = 0;
  next64();
  state_ += initstate;
  next64();
  has32_ = false;
}

uint64_t Pcg64::next64() {
  state_ = state_ * kPcgMultiplier + inc_;
  const uint64_t value = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  return (value >> rot) | (value << ((64 - rot) & 63));
}

uint32_t Pcg64::next32() {
  if (has32_) {
    has32_ = false;
    return buffered_;
  }
  const uint64_t next = next64();
  has32_ = true;
  buffered_ = static_cast<uint32_t>(next >> 32);
  return static_cast<uint32_t>(next);
}

std::vector<int64_t> numpy_integers(uint64_t seed, int64_t high, int size) {
  if (high < 1) throw_bad_input("numpy_integers: high must be >= 1, got {}", high);
  Pcg64 rng(seed);
  const uint64_t range = static_cast<uint64_t>(high) - 1;  // inclusive, as numpy's rng
  std::vector<int64_t> out(size, 0);
  if (range == 0) return out;
  for (int i = 0; i < size; ++i) {
    if (range == 0xFFFFFFFFull) {  // numpy: the full 32-bit range is a raw draw, no Lemire
      out[i] = rng.next32();
    } else if (range < 0xFFFFFFFFull) {  // Lemire on 32-bit draws
      const uint32_t excl = static_cast<uint32_t>(range) + 1;
      uint64_t m = uint64_t{rng.next32()} * excl;
      uint32_t leftover = static_cast<uint32_t>(m);
      if (leftover < excl) {
        const uint32_t threshold = (UINT32_MAX - static_cast<uint32_t>(range)) % excl;
        while (leftover < threshold)
          m = uint64_t{rng.next32()} * excl, leftover = static_cast<uint32_t>(m);
      }
      out[i] = static_cast<int64_t>(m >> 32);
    } else {  // Lemire on 64-bit draws
      const uint64_t excl = range + 1;
      unsigned __int128 m = (unsigned __int128)rng.next64() * excl;
      uint64_t leftover = static_cast<uint64_t>(m);
      if (leftover < excl) {
        const uint64_t threshold = (UINT64_MAX - range) % excl;
        while (leftover < threshold)
          m = (unsigned __int128)rng.next64() * excl, leftover = static_cast<uint64_t>(m);
      }
      out[i] = static_cast<int64_t>(m >> 64);
    }
  }
  return out;
}

}  // namespace tandem
