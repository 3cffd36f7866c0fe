#include "sim/vision_traffic.hpp"

#include <string>

namespace tandem::sim {

LaunchLog predict_vision(int64_t h, int64_t w, int64_t C, int64_t n, int64_t heads, int64_t hd,
                         int64_t T, int64_t E, int64_t k, int64_t hashed, ActDType act) {
  const uint64_t e = act_bytes(act);
  constexpr int A = int(Traffic::activation), W = int(Traffic::weight),
                K = int(Traffic::coefficient);
  LaunchCounts rope{launch_name("vision_rope_2d", act)};
  const uint64_t pairs = uint64_t(n * heads * hd / 2);
  rope.read[K] = uint64_t(n) * 2 * sizeof(int32_t);
  rope.read[W] = pairs * 2 * sizeof(float);  // (cos, sin) per pair
  rope.read[A] = rope.written[A] = 2 * pairs * e;
  LaunchLog log = predict_unshuffle(h, w, C, act);
  log.push_back(rope);
  log.push_back(predict_moe_gate(T, E, k, hashed));
  return log;
}

LaunchLog predict_unshuffle(int64_t h, int64_t w, int64_t C, ActDType act) {
  const uint64_t e = act_bytes(act), tokens = uint64_t((h + 2) / 3) * ((w + 2) / 3);
  constexpr int A = int(Traffic::activation);
  LaunchCounts unshuffle{launch_name("vision_unshuffle", act)},
      inverse{launch_name("vision_unshuffle_inverse", act)};
  unshuffle.read[A] = uint64_t(h * w * C) * e;  // padding is written as 0, never read
  unshuffle.written[A] = tokens * 9 * C * e;
  inverse.read[A] = inverse.written[A] = uint64_t(h * w * C) * e;
  return {unshuffle, inverse};
}

LaunchCounts predict_moe_gate(int64_t T, int64_t E, int64_t k, int64_t hashed) {
  constexpr int A = int(Traffic::activation), W = int(Traffic::weight);
  LaunchCounts gate{"moe_gate_biased_topk"};
  const int64_t ranked = T - hashed;
  // Every lane reads is_image; a ranked token every logit and its modality's bias, a hashed one
  // its id (every lane), its table row and those k logits.
  gate.read[A] = uint64_t(T) * 32 + uint64_t(ranked * E) * sizeof(float) +
                 uint64_t(hashed) * (32 * sizeof(int32_t) + k * sizeof(float));
  gate.read[W] = uint64_t(ranked * E) * sizeof(float) + uint64_t(hashed * k) * sizeof(int32_t);
  gate.written[A] = uint64_t(T * k) * (sizeof(int32_t) + sizeof(float));
  return gate;
}

}  // namespace tandem::sim
