#include "sim/indexer_traffic.hpp"

namespace tandem::sim {

LaunchCounts predict_topk_select(const std::vector<int32_t>& lengths, int k) {
  LaunchCounts c{launch_name("topk_select", ActDType::f32)};
  for (int32_t len : lengths) {
    c.read[int(Traffic::coefficient)] += sizeof(int32_t);
    c.read[int(Traffic::activation)] += 5 * uint64_t(len) * sizeof(float);
    c.written[int(Traffic::coefficient)] += uint64_t(k) * sizeof(int32_t);
  }
  return c;
}

}  // namespace tandem::sim
