#pragma once
// The KV cache's write side as data (DESIGN 5.5): records from values (the quantizers alone), the
// window store, the compressors (prefill and one decode step) and V4.1's index keys. Every kernel
// ends in the same pipeline for one record of `dims` values z (fp32):
//   bf16(z) -> RMSNorm over the format's normed dims (x weight) -> bf16   [the latent]
//   -> RoPE on the last 64 dims at the record's position (adjacent pairs) -> bf16
//   -> (V4 index keys) Hadamard-128 / sqrt(128) -> bf16                  [the stored values]
//   -> the format's tile quantizer into its cache slot.
// The stored values are returned beside the records (a verification output, `tap`): the records
// must be exactly their encoding, the values within the tolerance policy of the truth.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/tensor.hpp"
#include "problem/kv_record.hpp"
#include "problem/traffic.hpp"

namespace tandem {

inline constexpr int kKvRopeDims = 64;     // the last 64 dims of every record are RoPE dims
inline constexpr int kKvMainDims = 512;    // a main record (K == V), V4 / V4.1
inline constexpr int kIndexKeyDims = 128;  // an index key
// The kernels stage one [d] input row and one record in CUDA's default 48 KiB of shared memory.
inline constexpr int64_t kKvMaxHidden = 8192;

// A compressor (DESIGN 5.5): entry j pools tokens [r j, r j + r) (with overlap: also the previous
// group's first-half channels); a_t = Wkv x_t, b_t = Wgate x_t (+ ape[t mod r]).
struct KvCompressor {
  std::string name;
  int ratio = 4;
  bool overlap = false;  // r = 4 in V4: c = 2, 2r slots per entry
  bool ape = false;      // V4: learned position bias on the gate
  bool rotate = false;   // V4 index keys: Hadamard-128 after RoPE
  KvFormat format = KvFormat::model1;

  int coff() const { return overlap ? 2 : 1; }
  int dims() const { return kv_format_info(format).dims(); }  // D
  int width() const { return coff() * dims(); }               // c D
  int state_rows() const { return coff() * ratio; }           // c r
  bool gated() const { return ratio > 1; }                    // r = 1: RMSNorm(Wkv x) only
};
// The release's compressors: V4 CSA (r = 4, overlap, ape) main and index (Hadamard, MXFP4 or
// Hopper's FP8 index key), V4 HCA (r = 128), V4.1 r = 2 (no overlap, no ape) and r = 1.
KvCompressor v4_csa_compressor();
KvCompressor v4_csa_index_compressor(KvFormat index_format = KvFormat::idx_mxfp4);
KvCompressor v4_hca_compressor();
KvCompressor v41_compressor(int ratio);  // 2 or 1
std::vector<KvCompressor> release_compressors();
const KvCompressor* find_compressor(const std::string& name);
// The kernels' build of a compressor: its format, overlap, gate, ape and rotation as one of the
// release's six kinds above (the ratio is free; overlap needs r >= 2); -1 for any other mix.
int kv_compress_variant(const KvCompressor& c);

// Host-built RoPE rows (as the release precomputes freqs_cis): row k holds cos then sin of
// positions[k] * theta^(-2i/64), i = 0..31, in fp32 (computed in double, rounded once).
Tensor<float> kv_rope_table(const std::vector<int64_t>& positions, double theta);
// The rows of `count` consecutive positions from `start` (a chunk of tokens).
Tensor<float> kv_rope_table(int64_t start, int64_t count, double theta);

// What every record-writing kernel shares.
struct KvStoreOptions {
  KvFormat format = KvFormat::model1;
  int64_t page_size = 64;       // records per page
  int64_t pool_slots = 0;       // records the pool holds (a multiple of page_size)
  bool canonical_zero = false;  // -0 codes become +0
  double norm_eps = 1e-6;
  double rope_theta = 10000;
};
// Every pool byte no record covers keeps this value: a kernel writing outside its records shows.
inline constexpr uint8_t kKvPoison = 0xa5;
// Store options for `slots` records (at least one, rounded up to whole pages).
inline KvStoreOptions kv_store_options(KvFormat f, int64_t slots, int64_t page_size,
                                       double norm_eps) {
  KvStoreOptions o;
  o.format = f;
  o.page_size = page_size;
  o.pool_slots = std::max<int64_t>(1, (slots + page_size - 1) / page_size) * page_size;
  o.norm_eps = norm_eps;
  return o;
}
inline int64_t kv_pool_bytes(const KvStoreOptions& o) {
  const KvPageLayout l{kv_format_info(o.format), o.page_size};
  return o.pool_slots / o.page_size * l.page_bytes();
}

// The quantizers alone: row i of `values` into slot slots[i].
struct KvQuantizeInputs {
  KvStoreOptions store;
  Tensor<float> values;   // [N, dims] bf16 values
  Tensor<int32_t> slots;  // [N] distinct slots in [0, pool_slots)
  // The class the records' bytes count as: the cache's, or activations (the model's quantized
  // index queries, which no later step reads).
  Traffic traffic = Traffic::kv_cache;
};

// The window store: token t (position start + t) into ring slot (start + t) mod window.
struct KvWindowInputs {
  KvStoreOptions store;  // pool_slots = window rounded up to whole pages
  int window = 128;
  int64_t start = 0;     // position of x's first row
  Tensor<float> x;       // [T, d] bf16 hidden states
  Tensor<float> wkv;     // [dims, d]
  Tensor<float> norm_w;  // [normed]
};

// The compressor's fp32 state for one sequence: the partial group (and with overlap the previous
// group's slots), as the release keeps it. Rows of a slot hold a_t and b_t (+ ape).
struct KvCompressState {
  Tensor<float> a, b;  // [c r, c D]; b of an empty slot is -inf
};

// The compressor over a prefill of T tokens from position 0 (entries floor(T / r) into slots
// 0..), or one decode step at position `pos` with the state of positions < pos.
struct KvCompressInputs {
  KvStoreOptions store;
  KvCompressor comp;
  Tensor<float> x;       // [T, d] bf16 hidden states (decode: [1, d])
  Tensor<float> wkv;     // [c D, d]
  Tensor<float> wgate;   // [c D, d] (empty when r = 1)
  Tensor<float> ape;     // [r, c D] (empty without ape)
  Tensor<float> norm_w;  // [D]
  // Decode only:
  bool decode = false;
  int64_t pos = 0;
  KvCompressState state;
};

// V4.1's index keys: MXFP4(RoPE(RMSNorm(Wk latent_j))) at position r j, into slot j.
struct IndexKeyInputs {
  KvStoreOptions store;  // idx_mxfp4 (or idx_fp8)
  int ratio = 2;         // of the compressor the latents came from
  int64_t first = 0;     // the entry of latent's row 0 (a decode step keys its new entries only)
  Tensor<float> latent;  // [N, 512] bf16: pre-RoPE latents of entries first..first+N-1
  Tensor<float> wk;      // [128, 512]
  Tensor<float> norm_w;  // [128]
};

// Every input tensor with its name (the golden blob's tensor names).
template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, KvQuantizeInputs>
void for_each_tensor(Input& in, F&& f) {
  f("values", in.values);
  f("slots", in.slots);
}
template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, KvWindowInputs>
void for_each_tensor(Input& in, F&& f) {
  f("x", in.x);
  f("wkv", in.wkv);
  f("norm_w", in.norm_w);
}
template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, KvCompressInputs>
void for_each_tensor(Input& in, F&& f) {
  f("x", in.x);
  f("wkv", in.wkv);
  if (in.comp.gated()) f("wgate", in.wgate);
  if (in.comp.ape) f("ape", in.ape);
  f("norm_w", in.norm_w);
  if (in.decode) f("state.a", in.state.a), f("state.b", in.state.b);
}
template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, IndexKeyInputs>
void for_each_tensor(Input& in, F&& f) {
  f("latent", in.latent);
  f("wk", in.wk);
  f("norm_w", in.norm_w);
}

struct KvStoreOutputs {
  Tensor<uint8_t> pool;   // [pool bytes]: the records written, every other byte kKvPoison
  Tensor<float> stored;   // [N, dims] the values the records encode (bf16), one row per record
  Tensor<float> latent;   // compressors: [entries, D] pre-RoPE latents (bf16)
  KvCompressState state;  // compressors: the state after the run
  LaunchLog launches;
};

// Entries a prefill of T tokens makes; whether decoding position `pos` completes one.
inline int64_t kv_entries(int64_t T, int ratio) { return T / ratio; }
inline bool kv_decode_emits(int64_t pos, int ratio) { return (pos + 1) % ratio == 0; }

// The decode step's window index list after storing position `pos`: the ring slots of positions
// pos - window + 1 .. pos, oldest first, -1 for positions before 0.
std::vector<int32_t> window_index_list(int64_t pos, int window);

// BadInput naming the tensor or field: shapes the kernels support, finite inputs.
void validate_store_options(const KvStoreOptions& o, const char* what);
void validate_kv_quantize_inputs(const KvQuantizeInputs& in);
void validate_kv_window_inputs(const KvWindowInputs& in);
void validate_kv_compress_inputs(const KvCompressInputs& in);
void validate_index_key_inputs(const IndexKeyInputs& in);

}  // namespace tandem
