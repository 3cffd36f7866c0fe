#pragma once
// Block-scaled FP8 tensors as the release stores its linears (DESIGN 5.2, 5.6): e4m3 codes with
// one ue8m0 scale per B x B weight block (V4.1 B = 32, V4 B = 128) and activations quantized per
// B contiguous values, both with core/dtype.hpp's tile quantizer.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>

#include "core/tensor.hpp"

namespace tandem {

struct Fp8BlockMatrix {
  int block = 0;           // B
  Tensor<uint8_t> codes;   // [rows, cols] e4m3
  Tensor<uint8_t> scales;  // [ceil(rows / B), ceil(cols / B)] ue8m0
};

// Quantizes w [rows, cols]: each B x B block (partial at the edges) gets its own scale.
Fp8BlockMatrix quantize_fp8_blocks(const Tensor<float>& w, int block);
// The values the codes stand for, [rows, cols] (exact in float: an e4m3 value times 2^k).
Tensor<float> dequantize(const Fp8BlockMatrix& q);
// x quantized per `block` contiguous values and dequantized again, in place (exact in float).
void quantize_dequantize_fp8(std::span<float> x, int block);

// A weight matrix that many runs read (Engram's Wkv, 629 MB at V4.1's widths: a model's runs and
// both references, a verify row's 4 emulated runs) with its block-FP8 form made once per block
// size, on first use, and kept: shared as const, its values do not change (a writer of its values
// must do so before the first fp8_blocks, which would keep the old form).
class Fp8CachedWeight : public Tensor<float> {
 public:
  explicit Fp8CachedWeight(Tensor<float> values) : Tensor<float>(std::move(values)) {}
  // A checkpoint's block-FP8 linear: its values (dequantized), with `q` as their form at q.block
  // (the codes and scales as stored).
  explicit Fp8CachedWeight(Fp8BlockMatrix q);
  Fp8CachedWeight(const Fp8CachedWeight&) = delete;
  Fp8CachedWeight& operator=(const Fp8CachedWeight&) = delete;
  // quantize_fp8_blocks(*this, block), or the stored form handed in for its block.
  const Fp8BlockMatrix& fp8_blocks(int block) const;

 private:
  mutable std::mutex mutex_;
  mutable std::map<int, Fp8BlockMatrix> quantized_;  // by block; never erased (references kept)
};

}  // namespace tandem
