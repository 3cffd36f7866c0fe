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

MarkovDraftOutputs run_markov_draft(const MarkovDraftInputs& in, const RunOptions& opt) {
  begin_run(opt);
  const int64_t R = in.requests, K = in.budget, G = in.base.dim(1), V = in.base.dim(2);
  const int64_t d = in.streams.dim(3), rank = in.markov_in.dim(1);
  DeviceArray<float> base(in.base.data.size()), streams(in.streams.data.size());
  DeviceArray<float> coef(in.coef.data.size()), w1(in.markov_in.data.size());
  DeviceArray<float> w2(in.markov_out.data.size()), conf(in.confidence.data.size());
  DeviceArray<int32_t> last(R), tokens(size_t(R * K));
  DeviceArray<uint32_t> request(R), position(R);
  DeviceArray<float> logits(size_t(R * K * V)), p(size_t(R * K * V)), confidence(size_t(R * K));
  base.upload(in.base.data), streams.upload(in.streams.data), coef.upload(in.coef.data);
  w1.upload(in.markov_in.data), w2.upload(in.markov_out.data), conf.upload(in.confidence.data);
  last.upload(in.last), request.upload(in.request), position.upload(in.position);
  const unsigned blocks = unsigned((R + kMarkovWarpsPerBlock - 1) / kMarkovWarpsPerBlock);
  TANDEM_LAUNCH("dspark_markov_draft", dspark_markov_draft, dim3(blocks),
                dim3(kMarkovWarpsPerBlock * kWarpSize),
                size_t(kMarkovWarpsPerBlock) * size_t(rank) * sizeof(float), base.data(),
                streams.data(), coef.data(), w1.data(), w2.data(), conf.data(), last.data(),
                request.data(), position.data(), int(R), int(G), int(K), V, int(d), int(rank),
                in.seed, in.greedy, in.temperature, tokens.data(), logits.data(), p.data(),
                confidence.data());
  MarkovDraftOutputs out{Tensor<int32_t>({R, K}, tokens.download()),
                         Tensor<float>({R, K, V}, logits.download()),
                         Tensor<float>({R, K, V}, p.download()),
                         Tensor<float>({R, K}, confidence.download()),
                         {}};
  out.launches = end_run();
  return out;
}

}  // namespace tandem::TANDEM_BACKEND_NS
