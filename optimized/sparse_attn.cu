// Host launcher of sparse_decode_attn; compiled once per backend from this source.
#include <algorithm>
#include <string>
#include <vector>

#include "optimized/device_array.cuh"
#include "optimized/sparse_attn.cuh"
#include "optimized/sparse_attn.hpp"  // host headers first: the emulator's macros come after

namespace tandem::TANDEM_BACKEND_NS {

SparseAttnOutputs run_sparse_attn(const SparseAttnInputs& in, const RunOptions& opt) {
  begin_run(opt);
  const int64_t T = in.q.dim(0), H = in.heads;
  DeviceArray<bf16> q(in.q.data.size()), o(in.q.data.size());
  DeviceArray<float> sinks(in.sinks.data.size()), rope(size_t(T * kKvRopeDims)),
      lse(static_cast<size_t>(T * H));
  DeviceArray<uint8_t> wpool(in.window_pool.data.size()), cpool(in.comp_pool.data.size());
  DeviceArray<int32_t> widx(in.window_idx.data.size()), cidx(in.comp_idx.data.size()),
      pages(in.page_table.data.size());
  q.upload(to_storage<bf16>(in.q)), sinks.upload(in.sinks.data);
  rope.upload(kv_rope_table(in.start, T, in.rope_theta).data);
  wpool.upload(in.window_pool.data), cpool.upload(in.comp_pool.data);
  widx.upload(in.window_idx.data), cidx.upload(in.comp_idx.data), pages.upload(in.page_table.data);
  const int warps = opt.block_threads / kWarpSize;
  const size_t smem =
      sizeof(float) * (2 * kAttnGroup * kAttnDims + 2 * kAttnGroup * warps + 3 * kAttnGroup);
  const std::string name = launch_name(
      "sparse_decode_attn", ActDType::bf16,
      std::string(kv_format_name(in.window.format)) + "+" + kv_format_name(in.comp.format));
  auto launch = [&](auto kernel) {
    TANDEM_LAUNCH(name.c_str(), kernel, dim3(unsigned(T), unsigned(H / kAttnGroup)),
                  dim3(opt.block_threads), smem, q.data(), sinks.data(), rope.data(), wpool.data(),
                  in.window.page_size, widx.data(), int(in.window_idx.dim(1)), cpool.data(),
                  in.comp.page_size, pages.data(), cidx.data(), int(in.comp_idx.dim(1)), int(H),
                  o.data(), lse.data());
  };
  if (in.window.format == KvFormat::model1)
    launch(sparse_decode_attn<KvFormat::model1, KvFormat::model1>);
  else
    launch(sparse_decode_attn<KvFormat::v41_window, KvFormat::v41_fp4>);
  SparseAttnOutputs out;
  out.o = download_floats(o, {T, H, kAttnDims});
  out.lse = Tensor<float>({T, H}, lse.download());
  out.launches = end_run();
  return out;
}

RopeQueriesOutputs run_rope_queries(const RopeQueriesInputs& in, const RunOptions& opt) {
  begin_run(opt);
  const int64_t T = in.q.dim(0), H = in.q.dim(1), D = in.q.dim(2), rows = T * H;
  DeviceArray<float> q(in.q.data.size()), rope(size_t(T * kKvRopeDims));
  DeviceArray<bf16> out(in.q.data.size());
  q.upload(in.q.data), rope.upload(kv_rope_table(in.start, T, in.rope_theta).data);
  const int warps = opt.block_threads / kWarpSize;
  const unsigned blocks = grid_stride_blocks(rows, warps, opt);
  const std::string name = launch_name("rope_queries", ActDType::bf16, "d" + std::to_string(D));
  auto launch = [&](auto kernel) {
    TANDEM_LAUNCH(name.c_str(), kernel, dim3(blocks), dim3(opt.block_threads), 0, q.data(),
                  rope.data(), rows, int(H), out.data());
  };
  if (D == kIndexKeyDims)
    launch(rope_queries<kIndexKeyDims>);
  else
    launch(rope_queries<kKvMainDims>);
  RopeQueriesOutputs o;
  o.q = download_floats(out, {T, H, D});
  o.launches = end_run();
  return o;
}

}  // namespace tandem::TANDEM_BACKEND_NS
