#include "sim/indexer_traffic.hpp"

#include "problem/indexer.hpp"

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

LaunchCounts predict_candidate_blocks(const std::vector<int32_t>& lengths, int block, int keep) {
  LaunchCounts c{launch_name("candidate_blocks", ActDType::f32)};
  for (int32_t len : lengths) {
    const uint64_t n_blocks = (uint64_t(len) + block - 1) / block;
    const uint64_t read = n_blocks > 0 ? (n_blocks - 1) * block : 0;
    c.read[int(Traffic::coefficient)] += sizeof(int32_t);
    c.read[int(Traffic::activation)] += 5 * read * sizeof(float);
    c.written[int(Traffic::coefficient)] += uint64_t(keep) * sizeof(int32_t);
  }
  return c;
}

LaunchCounts predict_candidate_topk(const CandidateTopkInputs& in) {
  LaunchCounts c{launch_name("candidate_topk", ActDType::f32)};
  const int64_t C = in.blocks.dim(1);
  for (int64_t t = 0; t < in.scores.dim(0); ++t) {
    const int64_t entries = candidate_entries(in.blocks.ptr() + t * C, candidate_count(in, t),
                                              in.block, in.lengths.data[size_t(t)]);
    c.read[int(Traffic::coefficient)] += sizeof(int32_t) + uint64_t(C) * sizeof(int32_t);
    c.read[int(Traffic::activation)] += 5 * uint64_t(entries) * sizeof(float);
    c.written[int(Traffic::coefficient)] += uint64_t(in.top_k) * sizeof(int32_t);
  }
  return c;
}

LaunchCounts predict_index_logits(KvFormat format, int64_t T, int heads, int64_t n_keys, int ratio,
                                  int64_t start) {
  constexpr int64_t kKeysPerBlock = 64;  // optimized/indexer.cuh kIndexKeysPerBlock
  const uint64_t record = uint64_t(kv_format_info(format).record_bytes());
  LaunchCounts c{launch_name("index_logits", ActDType::f32, kv_format_name(format))};
  for (int64_t t = 0; t < T; ++t) {
    const int64_t length = visible_entries(start + t, ratio, n_keys);
    const uint64_t blocks = uint64_t((length + kKeysPerBlock - 1) / kKeysPerBlock);
    c.read[int(Traffic::activation)] += blocks * heads * record;  // the queries
    c.read[int(Traffic::kv_cache)] += uint64_t(length) * record;  // the keys scanned
    c.read[int(Traffic::weight)] += blocks * heads * sizeof(float);
    c.read[int(Traffic::coefficient)] += uint64_t(length) * sizeof(int32_t);
    c.written[int(Traffic::activation)] += uint64_t(length) * sizeof(float);
    c.written[int(Traffic::coefficient)] += sizeof(int32_t);
  }
  return c;
}

}  // namespace tandem::sim
