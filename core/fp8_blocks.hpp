#pragma once
// Block-scaled FP8 tensors as the release stores its linears (DESIGN 5.2, 5.6): e4m3 codes with
// one ue8m0 scale per B x B weight block (V4.1 B = 32, V4 B = 128) and activations quantized per
// B contiguous values, both with core/dtype.hpp's tile quantizer.
#include <cstdint>
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

}  // namespace tandem
