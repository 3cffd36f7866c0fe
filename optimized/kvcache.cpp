// The host entries of the KV cache kernels: validation (problem/kvcache.hpp), then the backend.
#include "optimized/kvcache.hpp"

#include "optimized/dispatch.hpp"

namespace tandem {

KvStoreOutputs run_kv_quantize(const KvQuantizeInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  validate_kv_quantize_inputs(in);
  return TANDEM_DISPATCH(opt, run_kv_quantize, in, opt);
}

KvStoreOutputs run_kv_window_store(const KvWindowInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  validate_kv_window_inputs(in);
  return TANDEM_DISPATCH(opt, run_kv_window_store, in, opt);
}

KvStoreOutputs run_kv_compress(const KvCompressInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  validate_kv_compress_inputs(in);
  return TANDEM_DISPATCH(opt, run_kv_compress, in, opt);
}

KvStoreOutputs run_index_key_store(const IndexKeyInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  validate_index_key_inputs(in);
  return TANDEM_DISPATCH(opt, run_index_key_store, in, opt);
}

}  // namespace tandem
