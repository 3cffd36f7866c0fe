// Host launchers for the vision kernels; compiled once per backend from this source.
#include <algorithm>
#include <cmath>
#include <string>

#include "optimized/device_array.cuh"
#include "optimized/vision.cuh"
#include "optimized/vision.hpp"  // host headers first: the emulator's macros come after

namespace tandem::TANDEM_BACKEND_NS {
namespace {

constexpr int kThreads = 128;

template <class Act>
UnshuffleOutputs unshuffle(const Tensor<float>& grid) {
  const int h = int(grid.dim(0)), w = int(grid.dim(1)), C = int(grid.dim(2));
  const int64_t tokens = int64_t{(h + 2) / 3} * ((w + 2) / 3);
  DeviceArray<Act> d_grid(grid.data.size()), d_tokens(size_t(tokens) * 9 * C),
      d_back(grid.data.size());
  d_grid.upload(to_storage<Act>(grid));
  TANDEM_LAUNCH(launch_name("vision_unshuffle", act_dtype_of<Act>()).c_str(), vision_unshuffle<Act>,
                dim3(unsigned(tokens)), dim3(kThreads), 0, d_grid.data(), h, w, C, d_tokens.data());
  TANDEM_LAUNCH(launch_name("vision_unshuffle_inverse", act_dtype_of<Act>()).c_str(),
                vision_unshuffle_inverse<Act>, dim3(unsigned(h * w)), dim3(kThreads), 0,
                d_tokens.data(), w, C, d_back.data());
  UnshuffleOutputs out;
  out.tokens = download_floats(d_tokens, {tokens, 9 * int64_t{C}});
  out.restored = download_floats(d_back, grid.shape);
  return out;
}

template <class Act>
Tensor<float> rope(const RopeInputs& in) {
  const int64_t N = in.x.dim(0);
  const int heads = int(in.x.dim(1)), hd = int(in.x.dim(2)), half = hd / 4;
  // (cos, sin) of pos * inv_freq for every position a token uses, evaluated in double.
  const int positions = 1 + std::max(*std::max_element(in.row.begin(), in.row.end()),
                                     *std::max_element(in.col.begin(), in.col.end()));
  std::vector<float2> rotation(size_t(positions) * half);
  for (int p = 0; p < positions; ++p)
    for (int j = 0; j < half; ++j) {
      const double angle = p * std::pow(in.theta, -double(2 * j) / (hd / 2));
      rotation[size_t(p) * half + j] = float2{float(std::cos(angle)), float(std::sin(angle))};
    }
  DeviceArray<Act> x(in.x.data.size()), out(in.x.data.size());
  DeviceArray<int32_t> row(N), col(N);
  DeviceArray<float2> freq(rotation.size());
  x.upload(to_storage<Act>(in.x));
  row.upload(in.row), col.upload(in.col), freq.upload(rotation);
  TANDEM_LAUNCH(launch_name("vision_rope_2d", act_dtype_of<Act>()).c_str(), vision_rope_2d<Act>,
                dim3(unsigned(N)), dim3(kThreads), 0, x.data(), row.data(), col.data(), freq.data(),
                heads, hd, out.data());
  return download_floats(out, in.x.shape);
}

}  // namespace

UnshuffleOutputs run_unshuffle(const Tensor<float>& grid, ActDType act, const RunOptions& opt) {
  begin_run(opt);
  UnshuffleOutputs out = act == ActDType::f32 ? unshuffle<float>(grid) : unshuffle<bf16>(grid);
  out.launches = end_run();
  return out;
}

RopeOutputs run_rope_2d(const RopeInputs& in, ActDType act, const RunOptions& opt) {
  begin_run(opt);
  RopeOutputs out{act == ActDType::f32 ? rope<float>(in) : rope<bf16>(in), {}};
  out.launches = end_run();
  return out;
}

MoeGateOutputs run_moe_gate(const MoeGateInputs& in, const RunOptions& opt) {
  begin_run(opt);
  const int64_t T = in.logits.dim(0);
  const int E = int(in.logits.dim(1)), k = in.top_k;
  DeviceArray<float> logits(in.logits.data), bias_text(in.bias_text), bias_vl(in.bias_vl),
      weights(size_t(T) * k);
  DeviceArray<uint8_t> is_image(in.is_image);
  DeviceArray<int32_t> experts(size_t(T) * k), token_ids(in.token_ids), tid2eid(in.tid2eid.data);
  const unsigned blocks = unsigned((T + kMoeWarpsPerBlock - 1) / kMoeWarpsPerBlock);
  TANDEM_LAUNCH("moe_gate_biased_topk", moe_gate_biased_topk, dim3(blocks),
                dim3(kMoeWarpsPerBlock * kWarpSize), 0, logits.data(), is_image.data(),
                bias_text.data(), bias_vl.data(), in.hashes() ? token_ids.data() : nullptr,
                in.hashes() ? tid2eid.data() : nullptr, int(T), E, k, in.route_scale,
                experts.data(), weights.data());
  MoeGateOutputs out;
  out.experts = Tensor<int32_t>({T, k}, experts.download());
  out.weights = Tensor<float>({T, k}, weights.download());
  out.launches = end_run();
  return out;
}

}  // namespace tandem::TANDEM_BACKEND_NS
