#include "sim/attention_traffic.hpp"

#include <string>

namespace tandem::sim {

LaunchLog predict_attention(int64_t T, int64_t P, int64_t d, ActDType act) {
  constexpr int A = int(Traffic::activation);
  const uint64_t e = act_bytes(act);
  // Token t sees P + t + 1 positions: sum over t = T P + T (T + 1) / 2.
  const uint64_t visible = uint64_t(T * P + T * (T + 1) / 2);
  LaunchCounts c{launch_name("attention_causal", act)};
  c.read[A] = uint64_t(T * d) * e + 2 * visible * uint64_t(d) * e;
  c.written[A] = uint64_t(T * d) * e;
  return {c};
}

}  // namespace tandem::sim
