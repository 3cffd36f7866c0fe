// Host launcher of topk_select; compiled once per backend from this source.
#include <string>

#include "optimized/device_array.cuh"
#include "optimized/indexer.cuh"
#include "optimized/indexer.hpp"  // host headers first: the emulator's macros come after

namespace tandem::TANDEM_BACKEND_NS {

TopkOutputs run_topk_select(const TopkInputs& in, const RunOptions& opt) {
  begin_run(opt);
  const int64_t T = in.scores.dim(0), N = in.scores.dim(1);
  DeviceArray<float> scores(in.scores.data.size());
  DeviceArray<int32_t> lengths(in.lengths.data.size()), indices(size_t(T * in.top_k));
  scores.upload(in.scores.data), lengths.upload(in.lengths.data);
  const std::string name = launch_name("topk_select", ActDType::f32);
  TANDEM_LAUNCH(name.c_str(), topk_select, dim3(unsigned(T)), dim3(opt.block_threads), 0,
                scores.data(), lengths.data(), int(N), in.top_k, indices.data());
  TopkOutputs out;
  out.indices = Tensor<int32_t>({T, in.top_k}, indices.download());
  out.launches = end_run();
  return out;
}

}  // namespace tandem::TANDEM_BACKEND_NS
