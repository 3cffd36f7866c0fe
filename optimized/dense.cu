// Host launcher for dense_rows; compiled once per backend from this source.
#include <algorithm>
#include <string>

#include "optimized/dense.cuh"
#include "optimized/dense.hpp"  // host headers first: the emulator's macros come after
#include "optimized/device_array.cuh"

namespace tandem::TANDEM_BACKEND_NS {
namespace {

template <class Act, bool kBias, bool kGelu>
Tensor<float> run_dense(const DenseInputs& in, const RunOptions& opt) {
  const int64_t T = in.x.dim(0), n_in = in.x.dim(1), n_out = in.w.dim(0);
  DeviceArray<Act> x(in.x.data.size()), y(size_t(T * n_out));
  const bool kmajor = dense_kmajor(n_in);  // one group (validated)
  const std::vector<float> transposed = kmajor ? k_major(in.w) : std::vector<float>{};
  DeviceArray<float> w(kmajor ? transposed : in.w.data);  // two lvalues: no copy of in.w
  DeviceArray<float> bias(std::max<size_t>(1, in.bias.data.size()));
  x.upload(to_storage<Act>(in.x));
  if (kBias) bias.upload(in.bias.data);
  const std::string name =
      launch_name("dense_rows", act_dtype_of<Act>(), dense_epilogue_name(kBias, kGelu));
  const size_t smem = sizeof(float) * size_t(n_in);  // the token's input row
  auto launch = [&](auto kernel) {
    TANDEM_ALLOW_DYNAMIC_SHARED(kernel, smem);  // always, as the other staging kernels
    TANDEM_LAUNCH(name.c_str(), kernel, dim3(unsigned(T)), dim3(opt.block_threads), smem, x.data(),
                  w.data(), bias.data(), int(n_in), int(n_out), in.groups, y.data());
  };
  if (kmajor)
    launch(dense_rows<Act, kBias, kGelu, true>);
  else
    launch(dense_rows<Act, kBias, kGelu, false>);
  return download_floats(y, {T, n_out});
}

template <class Act>
Tensor<float> run_dense(const DenseInputs& in, const RunOptions& opt) {
  if (in.bias.data.empty())
    return in.gelu ? run_dense<Act, false, true>(in, opt) : run_dense<Act, false, false>(in, opt);
  return in.gelu ? run_dense<Act, true, true>(in, opt) : run_dense<Act, true, false>(in, opt);
}

}  // namespace

DenseOutputs run_dense_rows(const DenseInputs& in, const RunOptions& opt) {
  begin_run(opt);
  DenseOutputs out;
  out.y = in.act == ActDType::f32 ? run_dense<float>(in, opt) : run_dense<bf16>(in, opt);
  out.launches = end_run();
  return out;
}

}  // namespace tandem::TANDEM_BACKEND_NS
