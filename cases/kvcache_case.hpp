#pragma once
// KV cache write cases (DESIGN 5.5): seeded inputs for the quantizers, the window store, the
// compressors and the index keys, the reference run (truth and baseline drawn in several
// summation orders) and the comparison every caller shares (tests, verify, golden, fuzz, bench):
// the stored values and latents within the tolerance policy of the truth, the records exactly
// the encoding of the values the kernel stored, every other pool byte untouched.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "cases/tensor_check.hpp"
#include "core/json_fields.hpp"
#include "optimized/kvcache.hpp"

namespace tandem {

// A golden manifest's store options: written, and read back field by field (BadInput naming the
// field).
nlohmann::json kv_store_json(const KvStoreOptions& o);
KvStoreOptions parse_kv_store(const JsonFields& f);

// A golden case's pool is allocated by the reference and the kernels alike: golden cases are
// small, their manifests refused past this many pool bytes.
inline constexpr int64_t kMaxGoldenPoolBytes = int64_t{64} << 20;

// N rows of bf16 values: per tile a magnitude 2^u (u in [-30, 30]), with edge tiles mixed in
// when `edges` (amax at 448 2^k or 6 2^k and one bf16 step either side, all-zero and -0 tiles,
// subnormal-range values); slots a seeded permutation of the pool.
KvQuantizeInputs make_kv_quantize_inputs(KvFormat f, int64_t rows, int64_t page_size, uint64_t seed,
                                         bool edges = true);
// T tokens of width d at positions start.. into a ring of `window`.
KvWindowInputs make_kv_window_inputs(KvFormat f, int64_t T, int64_t d, int window, int64_t start,
                                     int64_t page_size, double norm_eps, uint64_t seed);
// A prefill of T tokens through compressor c.
KvCompressInputs make_kv_compress_inputs(const KvCompressor& c, int64_t T, int64_t d,
                                         int64_t page_size, double norm_eps, uint64_t seed);
// N latents of entries first.. of a ratio-r compressor into index keys of format f (a pool of
// first + N slots).
IndexKeyInputs make_index_key_inputs(KvFormat f, int64_t N, int ratio, int64_t page_size,
                                     double norm_eps, uint64_t seed, int64_t first = 0);

struct KvReference {
  Tensor<double> stored, stored_baseline;                               // [N, dims]
  Tensor<double> latent, latent_baseline;                               // compressors: [entries, D]
  Tensor<double> state_a, state_a_baseline, state_b, state_b_baseline;  // compressors
  std::vector<int64_t> slots;  // the cache slot of each row of stored
};
KvReference run_kv_reference(const KvWindowInputs& in);
KvReference run_kv_reference(const KvCompressInputs& in);
KvReference run_kv_reference(const IndexKeyInputs& in);

// stored / latent / state.a / state.b under the tolerance policy, and "pool": the kernel's pool
// equals the reference encoding of the values the kernel stored, slot for slot (the poison
// everywhere else).
std::vector<TensorCheck> compare_kv(const KvReference& ref, const KvStoreOutputs& out,
                                    const KvStoreOptions& store);

// The records of one slot copied from one pool to another (code, RoPE and scale bytes).
void copy_record(const KvStoreOptions& o, const Tensor<uint8_t>& from, Tensor<uint8_t>& to,
                 int64_t slot);

// The compressor fed token by token from an empty state: the pool of every emitted record, the
// stored values and latents in entry order, and the final state; "decode == prefill" compares
// all of it with the prefill's outputs bit for bit.
KvStoreOutputs run_kv_decode_chain(const KvCompressInputs& prefill, const RunOptions& opt);
std::vector<TensorCheck> compare_decode_chain(const KvStoreOutputs& prefill,
                                              const KvStoreOutputs& chain);

}  // namespace tandem
