#pragma once
// Eigen reference of Engram (DESIGN 5.2): compression, suffix n-grams, hashing, FP8 rows and the
// V4.1 gate, written to read like the math. Discrete parts are exact; the gate is templated on the
// scalar (double = truth, float = baseline) and the storage dtype Act of the streams.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/engram_config.hpp"
#include "core/safetensors.hpp"
#include "core/tensor.hpp"
#include "problem/engram.hpp"

namespace tandem::reference {

// The tokenizer compression map: vocab ids -> compressed ids.
struct CompressionMap {
  std::vector<int32_t> map;  // [vocab]
  int64_t compressed_vocab = 0;
};
CompressionMap load_compression_map(const std::string& path, const EngramConfig& cfg);
// The tensor 'map' of `st` ([vocab], every value in [0, compressed_vocab)); BadInput naming
// `path` otherwise.
CompressionMap compression_map_from(const Safetensors& st, const EngramConfig& cfg,
                                    const std::string& path);
// The same for the tensor as read from `path`.
CompressionMap compression_map_from(const Tensor<int32_t>& map, const EngramConfig& cfg,
                                    const std::string& path);
// A deterministic synthetic map (the real one comes from the tokenizer): ids below the
// compressed vocab map to themselves, the rest to seeded ids, so every compressed id is used.
CompressionMap synthetic_compression_map(int64_t vocab, int64_t compressed_vocab, uint64_t seed);
// Compresses token ids; negative ids (image positions, DEAD) pass through. An id >= vocab is
// BadInput naming its position.
std::vector<int64_t> compress(std::span<const int64_t> ids, const CompressionMap& m);

// The suffix n-gram of order k at position t: c_t, c_{t-1}, ..., c_{t-k+1}. Positions before the
// chunk read `history` (oldest first), then the (compressed) pad id; look-back stops at a negative
// id and stays stopped: those and all older terms read the pad id.
std::vector<int64_t> suffix_ngram(std::span<const int64_t> ids, std::span<const int64_t> history,
                                  int64_t t, int k, int64_t pad);

// Addresses [T, lookups]: row = offset[k][j] + (h mod p[k][j]) with h = c_t m_0 ^ c_{t-1} m_1 ^ ...
// At a marker position (negative id) the n-gram is all pad, as the release hashes it; -1 (no
// lookup) there only with cfg.skip_marker_lookups.
Tensor<int64_t> engram_addresses(const EngramConfig& cfg, const EngramLayerTables& tables,
                                 std::span<const int64_t> compressed,
                                 std::span<const int64_t> history, int64_t compressed_pad);

// Seeded synthetic table of `rows` rows (e4m3 codes never NaN, scales 2^-4..2^0).
std::vector<uint8_t> synthetic_table(int64_t rows, int row_bytes, uint64_t seed);
// Dequantised rows [T, lookups * head_dim] of in.table (whole or sampled: engram_table_row; 0
// where the address is -1). Exact in float.
Tensor<float> gather_rows(const EngramInputs& in, const Tensor<int64_t>& addresses);

// The gate's linear as a float problem. With cfg.wkv_fp8_block = B (the release's FP8 linear)
// the weight becomes the values of its B x B block quantization and each token's rows are
// quantized per B values and dequantized: the FP8 GEMM on those codes equals this float problem
// exactly (every e4m3 value times a power of two is a float). The result has wkv_fp8_block = 0;
// without FP8 it is the problem as given.
struct GateProblem {
  EngramInputs in;
  Tensor<float> rows;  // [T, lookups * head_dim]
};
GateProblem float_gate_problem(const EngramInputs& in, const Tensor<float>& rows);

struct GateOutputs {
  Tensor<double> gates;  // [T, 4]
  Tensor<double> h_out;  // [T, 4, d]
};
// kv = Wkv e; per stream i: dot_i = sum(h_i w_i key_i) rsqrt(mean h_i^2 + eps)
// rsqrt(mean key_i^2 + eps) / sqrt(d); gate_i = sigmoid(copysign(sqrt(max(|dot_i|, 1e-6)), dot_i));
// h_i += gate_i value; gate 0 at negative (image / DEAD) positions. On float_gate_problem's
// result (truth and baseline take any problem and convert it first).
template <class S, class Act>
GateOutputs engram_gate(const EngramInputs& in, const Tensor<float>& rows);
GateOutputs engram_gate_truth(const EngramInputs& in, const Tensor<float>& rows);
GateOutputs engram_gate_baseline(const EngramInputs& in, const Tensor<float>& rows);

}  // namespace tandem::reference
