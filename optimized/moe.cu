// Host launcher for the MoE expert FFN; compiled once per backend from this source.
#include <string>

#include "optimized/device_array.cuh"
#include "optimized/moe.cuh"
#include "optimized/moe.hpp"  // host headers first: the emulator's macros come after

namespace tandem::TANDEM_BACKEND_NS {
namespace {

template <class Act>
Tensor<float> run_experts(const MoeExpertInputs& in, const RunOptions& opt) {
  const int64_t T = in.y.dim(0), d = in.y.dim(1), k = in.experts.dim(1), H = in.w_in.dim(1) / 2;
  DeviceArray<Act> y(in.y.data.size()), f(in.y.data.size());
  DeviceArray<int32_t> experts(in.experts.data.size());
  DeviceArray<float> weights(in.weights.data.size()), w_in(in.w_in.data), w_out(in.w_out.data);
  y.upload(to_storage<Act>(in.y)), experts.upload(in.experts.data);
  weights.upload(in.weights.data);
  const std::string name = launch_name("moe_experts_weighted", act_dtype_of<Act>());
  // Past 48 KiB at a release's widths (d 5120, H 2304: 50 KiB); validation bounds it by sm_90's.
  const size_t smem = sizeof(float) * (2 * d + H);
  TANDEM_ALLOW_DYNAMIC_SHARED(moe_experts_weighted<Act>, smem);
  TANDEM_LAUNCH(name.c_str(), moe_experts_weighted<Act>, dim3(unsigned(T)), dim3(opt.block_threads),
                smem, y.data(), experts.data(), weights.data(), w_in.data(), w_out.data(), int(d),
                int(H), int(k), f.data());
  return download_floats(f, {T, d});
}

}  // namespace

MoeExpertOutputs run_moe_experts(const MoeExpertInputs& in, const RunOptions& opt) {
  begin_run(opt);
  MoeExpertOutputs out;
  out.f = in.act == ActDType::f32 ? run_experts<float>(in, opt) : run_experts<bf16>(in, opt);
  out.launches = end_run();
  return out;
}

}  // namespace tandem::TANDEM_BACKEND_NS
