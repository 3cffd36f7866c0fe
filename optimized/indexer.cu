// Host launchers of the selection kernels; compiled once per backend from this source.
#include <algorithm>
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

CandidateBlocksOutputs run_candidate_blocks(const CandidateBlocksInputs& in,
                                            const RunOptions& opt) {
  begin_run(opt);
  const int64_t T = in.scores.dim(0), N = in.scores.dim(1);
  DeviceArray<float> scores(in.scores.data.size());
  DeviceArray<int32_t> lengths(in.lengths.data.size()), blocks(size_t(T * in.keep));
  scores.upload(in.scores.data), lengths.upload(in.lengths.data);
  const std::string name = launch_name("candidate_blocks", ActDType::f32);
  TANDEM_LAUNCH(name.c_str(), candidate_blocks, dim3(unsigned(T)), dim3(opt.block_threads), 0,
                scores.data(), lengths.data(), int(N), in.block, in.keep, blocks.data());
  CandidateBlocksOutputs out;
  out.blocks = Tensor<int32_t>({T, in.keep}, blocks.download());
  out.launches = end_run();
  return out;
}

TopkOutputs run_candidate_topk(const CandidateTopkInputs& in, const RunOptions& opt) {
  begin_run(opt);
  const int64_t T = in.scores.dim(0), N = in.scores.dim(1), C = in.blocks.dim(1);
  DeviceArray<float> scores(in.scores.data.size());
  DeviceArray<int32_t> lengths(in.lengths.data.size()), blocks(in.blocks.data.size()),
      indices(size_t(T * in.top_k));
  scores.upload(in.scores.data), lengths.upload(in.lengths.data), blocks.upload(in.blocks.data);
  const std::string name = launch_name("candidate_topk", ActDType::f32);
  TANDEM_LAUNCH(name.c_str(), candidate_topk, dim3(unsigned(T)), dim3(opt.block_threads), 0,
                scores.data(), lengths.data(), blocks.data(), int(N), int(C), in.block, in.top_k,
                indices.data());
  TopkOutputs out;
  out.indices = Tensor<int32_t>({T, in.top_k}, indices.download());
  out.launches = end_run();
  return out;
}

IndexLogitsOutputs run_index_logits(const IndexLogitsInputs& in, const RunOptions& opt) {
  begin_run(opt);
  const int64_t T = in.w.dim(0), n = in.n_keys;
  DeviceArray<uint8_t> q(in.q_records.data.size()), keys(in.key_pool.data.size());
  DeviceArray<float> w(in.w.data.size()), scores(size_t(T * n));
  DeviceArray<int32_t> pages(in.page_table.data.size()), lengths(static_cast<size_t>(T));
  q.upload(in.q_records.data), keys.upload(in.key_pool.data), w.upload(in.w.data);
  pages.upload(in.page_table.data);
  const dim3 grid(unsigned(std::max<int64_t>(1, (n + kIndexKeysPerBlock - 1) / kIndexKeysPerBlock)),
                  unsigned(T));
  const size_t smem =
      sizeof(float) * (size_t(in.heads) * 129 + size_t(opt.block_threads / 32) * 128);
  const std::string name =
      launch_name("index_logits", ActDType::f32, kv_format_name(in.keys.format));
  auto launch = [&](auto kernel) {
    TANDEM_LAUNCH(name.c_str(), kernel, grid, dim3(opt.block_threads), smem, q.data(), w.data(),
                  keys.data(), pages.data(), in.heads, n, in.ratio, in.start, in.keys.page_size,
                  in.weight_scale, scores.data(), lengths.data());
  };
  if (in.keys.format == KvFormat::idx_mxfp4)
    launch(index_logits<KvFormat::idx_mxfp4>);
  else
    launch(index_logits<KvFormat::idx_fp8>);
  IndexLogitsOutputs out;
  out.scores = Tensor<float>({T, n}, scores.download());
  out.lengths = Tensor<int32_t>({T}, lengths.download());
  out.launches = end_run();
  return out;
}

}  // namespace tandem::TANDEM_BACKEND_NS
