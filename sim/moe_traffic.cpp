#include "sim/moe_traffic.hpp"

#include <string>

namespace tandem::sim {

LaunchLog predict_moe_experts(int64_t T, int64_t d, int64_t H, int64_t k, ActDType act) {
  constexpr int A = int(Traffic::activation), W = int(Traffic::weight),
                C = int(Traffic::coefficient);
  LaunchCounts c{launch_name("moe_experts_weighted", act)};
  c.read[A] = c.written[A] = uint64_t(T * d) * act_bytes(act);
  c.read[C] = uint64_t(T * k) * (sizeof(int32_t) + sizeof(float));    // expert id, gate weight
  c.read[W] = uint64_t(T * k) * 3 * uint64_t(H * d) * sizeof(float);  // gate, up, out
  return {c};
}

}  // namespace tandem::sim
