#pragma once
// The KV cache's write kernels as seen from the host (problem/kvcache.hpp).
#include "optimized/backend.hpp"
#include "problem/kvcache.hpp"

namespace tandem {

#define TANDEM_KVCACHE_ENTRIES(X)                                                        \
  X(KvStoreOutputs run_kv_quantize(const KvQuantizeInputs& in, const RunOptions& opt))   \
  X(KvStoreOutputs run_kv_window_store(const KvWindowInputs& in, const RunOptions& opt)) \
  X(KvStoreOutputs run_kv_compress(const KvCompressInputs& in, const RunOptions& opt))   \
  X(KvStoreOutputs run_index_key_store(const IndexKeyInputs& in, const RunOptions& opt))
#define TANDEM_KVCACHE_DECLARE(decl) decl;

TANDEM_KVCACHE_ENTRIES(TANDEM_KVCACHE_DECLARE)
namespace emu_backend {
TANDEM_KVCACHE_ENTRIES(TANDEM_KVCACHE_DECLARE)
}
namespace cuda_backend {
TANDEM_KVCACHE_ENTRIES(TANDEM_KVCACHE_DECLARE)
}

}  // namespace tandem
