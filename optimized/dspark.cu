// Host launcher for DSpark verification; compiled once per backend from this source.
#include "optimized/device_array.cuh"
#include "optimized/dspark.cuh"
#include "optimized/dspark.hpp"  // host headers first: the emulator's macros come after

namespace tandem::TANDEM_BACKEND_NS {

VerifyOutputs run_dspark_verify(const VerifyInputs& in, const RunOptions& opt) {
  begin_run(opt);
  const int64_t R = in.requests, K = in.budget;
  DeviceArray<int32_t> draft(in.draft.data.size()), accepted(R), emitted(size_t(R) * (K + 1));
  DeviceArray<float> p_draft(in.p_draft.data.size()), p_target(in.p_target.data.size());
  DeviceArray<uint32_t> position(R), request(in.request.size());
  DeviceArray<int32_t> drafted(in.drafted.size());
  draft.upload(in.draft.data), p_draft.upload(in.p_draft.data), p_target.upload(in.p_target.data);
  position.upload(in.position), request.upload(in.request), drafted.upload(in.drafted);
  const unsigned blocks = unsigned((R + kVerifyWarpsPerBlock - 1) / kVerifyWarpsPerBlock);
  TANDEM_LAUNCH("dspark_verify", dspark_verify, dim3(blocks),
                dim3(kVerifyWarpsPerBlock * kWarpSize), 0, draft.data(), p_draft.data(),
                p_target.data(), position.data(), in.drafted.empty() ? nullptr : drafted.data(),
                in.request.empty() ? nullptr : request.data(), int(R), int(K), in.vocab, in.seed,
                in.greedy, accepted.data(), emitted.data());
  VerifyOutputs out{accepted.download(), Tensor<int32_t>({R, K + 1}, emitted.download()), {}};
  out.launches = end_run();
  return out;
}

}  // namespace tandem::TANDEM_BACKEND_NS
