#include "sim/sparse_attn_traffic.hpp"

#include <string>

namespace tandem::sim {

LaunchCounts predict_sparse_attn(const SparseAttnInputs& in) {
  constexpr int A = int(Traffic::activation), Wt = int(Traffic::weight),
                C = int(Traffic::coefficient), K = int(Traffic::kv_cache);
  constexpr uint64_t kGroup = kSparseAttnHeadGroup, kDims = kKvMainDims;
  LaunchCounts c{launch_name(
      "sparse_decode_attn", ActDType::bf16,
      std::string(kv_format_name(in.window.format)) + "+" + kv_format_name(in.comp.format))};
  const int64_t T = in.q.dim(0), W = in.window_idx.dim(1), Kc = in.comp_idx.dim(1);
  const uint64_t groups = uint64_t(in.heads) / kGroup;
  const uint64_t w_record = uint64_t(kv_format_info(in.window.format).record_bytes());
  const uint64_t c_record = uint64_t(kv_format_info(in.comp.format).record_bytes());
  for (int64_t t = 0; t < T; ++t) {
    uint64_t valid_w = 0, valid_c = 0;
    for (int64_t i = 0; i < W; ++i) valid_w += in.window_idx.data[size_t(t * W + i)] != -1;
    for (int64_t i = 0; i < Kc; ++i) valid_c += in.comp_idx.data[size_t(t * Kc + i)] != -1;
    const bool any = valid_w + valid_c > 0;
    c.read[A] += groups * kGroup * kDims * 2;
    c.read[Wt] += groups * kGroup * sizeof(float);
    c.read[C] += groups * ((uint64_t(W + Kc) + valid_c) * sizeof(int32_t) +
                           (any ? kGroup * kKvRopeDims * sizeof(float) : 0));
    c.read[K] += groups * (valid_w * w_record + valid_c * c_record);
    c.written[A] += groups * (kGroup * kDims * 2 + kGroup * sizeof(float));
  }
  return c;
}

LaunchCounts predict_rope_queries(int64_t T, int64_t heads, int64_t dims) {
  LaunchCounts c{launch_name("rope_queries", ActDType::bf16, "d" + std::to_string(dims))};
  const uint64_t rows = uint64_t(T * heads);
  c.read[int(Traffic::activation)] = rows * uint64_t(dims) * sizeof(float);
  c.read[int(Traffic::coefficient)] = rows * kKvRopeDims * sizeof(float);
  c.written[int(Traffic::activation)] = rows * uint64_t(dims) * 2;
  return c;
}

}  // namespace tandem::sim
