// Host launcher for causal attention; compiled once per backend from this source.
#include <string>

#include "optimized/attention.cuh"
#include "optimized/attention.hpp"  // host headers first: the emulator's macros come after
#include "optimized/device_array.cuh"

namespace tandem::TANDEM_BACKEND_NS {
namespace {

template <class Act>
Tensor<float> run_attention(const AttentionInputs& in, const RunOptions& opt) {
  const int64_t T = in.q.dim(0), d = in.q.dim(1), positions = in.keys.dim(0);
  const int64_t P = positions - T, hd = d / in.heads;
  DeviceArray<Act> q(in.q.data.size()), keys(in.keys.data.size()), values(in.values.data.size()),
      o(in.q.data.size());
  q.upload(to_storage<Act>(in.q)), keys.upload(to_storage<Act>(in.keys));
  values.upload(to_storage<Act>(in.values));
  const std::string name = launch_name("attention_causal", act_dtype_of<Act>());
  TANDEM_LAUNCH(name.c_str(), attention_causal<Act>, dim3(unsigned(T), unsigned(in.heads)),
                dim3(opt.block_threads), sizeof(float) * (positions + hd), q.data(), keys.data(),
                values.data(), int(P), int(d), int(hd), o.data());
  return download_floats(o, {T, d});
}

}  // namespace

AttentionOutputs run_attention_causal(const AttentionInputs& in, const RunOptions& opt) {
  begin_run(opt);
  AttentionOutputs out;
  out.o = in.act == ActDType::f32 ? run_attention<float>(in, opt) : run_attention<bf16>(in, opt);
  out.launches = end_run();
  return out;
}

}  // namespace tandem::TANDEM_BACKEND_NS
