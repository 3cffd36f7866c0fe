// Host launcher for dense_rows; compiled once per backend from this source.
#include <string>

#include "optimized/dense.cuh"
#include "optimized/dense.hpp"  // host headers first: the emulator's macros come after
#include "optimized/device_array.cuh"

namespace tandem::TANDEM_BACKEND_NS {
namespace {

template <class Act>
Tensor<float> run_dense(const DenseInputs& in, const RunOptions& opt) {
  const int64_t T = in.x.dim(0), n_in = in.x.dim(1), n_out = in.w.dim(0);
  DeviceArray<Act> x(in.x.data.size()), y(size_t(T * n_out));
  DeviceArray<float> w(in.w.data.size());
  x.upload(to_storage<Act>(in.x)), w.upload(in.w.data);
  const std::string name = std::string("dense_rows<") + (sizeof(Act) == 4 ? "f32" : "bf16") + ">";
  TANDEM_LAUNCH(name.c_str(), dense_rows<Act>, dim3(unsigned(T)), dim3(opt.block_threads),
                sizeof(float) * n_in, x.data(), w.data(), int(n_in), int(n_out), y.data());
  return download_floats(y, {T, n_out});
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
