#include "core/fp8_blocks.hpp"

#include <algorithm>
#include <cmath>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace tandem {
namespace {

void check_block(int block) {
  if (block != 32 && block != 128)
    throw_bad_input("FP8 block size {}: the releases use 32 (V4.1) or 128 (V4)", block);
}

}  // namespace

Fp8BlockMatrix quantize_fp8_blocks(const Tensor<float>& w, int block) {
  check_block(block);
  const int64_t rows = w.dim(0), cols = w.dim(1), B = block;
  const int64_t br = (rows + B - 1) / B, bc = (cols + B - 1) / B;
  Fp8BlockMatrix q{block, Tensor<uint8_t>({rows, cols}), Tensor<uint8_t>({br, bc})};
  for (int64_t i = 0; i < br; ++i)
    for (int64_t j = 0; j < bc; ++j) {
      const int64_t r1 = std::min(rows, (i + 1) * B), c1 = std::min(cols, (j + 1) * B);
      float amax = 0;
      for (int64_t r = i * B; r < r1; ++r)
        for (int64_t c = j * B; c < c1; ++c) amax = std::max(amax, std::fabs(w.data[r * cols + c]));
      const uint8_t code = fp8_tile_scale_code(amax);
      q.scales.data[i * bc + j] = code;
      for (int64_t r = i * B; r < r1; ++r)
        for (int64_t c = j * B; c < c1; ++c)
          q.codes.data[r * cols + c] = fp8_tile_code(w.data[r * cols + c], ue8m0_decode(code));
    }
  return q;
}

Tensor<float> dequantize(const Fp8BlockMatrix& q) {
  const int64_t rows = q.codes.dim(0), cols = q.codes.dim(1), B = q.block;
  const int64_t bc = q.scales.dim(1);
  Tensor<float> w({rows, cols});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      w.data[r * cols + c] = e4m3_decode(q.codes.data[r * cols + c]) *
                             ue8m0_decode(q.scales.data[(r / B) * bc + c / B]);
  return w;
}

Fp8CachedWeight::Fp8CachedWeight(Fp8BlockMatrix q) : Tensor<float>(dequantize(q)) {
  const int block = q.block;
  quantized_.emplace(block, std::move(q));
}

const Fp8BlockMatrix& Fp8CachedWeight::fp8_blocks(int block) const {
  const std::lock_guard lock(mutex_);
  auto it = quantized_.find(block);
  if (it == quantized_.end())
    it = quantized_.emplace(block, quantize_fp8_blocks(*this, block)).first;
  return it->second;
}

void quantize_dequantize_fp8(std::span<float> x, int block) {
  check_block(block);
  for (size_t begin = 0; begin < x.size(); begin += size_t(block)) {
    const std::span<float> tile = x.subspan(begin, std::min(x.size() - begin, size_t(block)));
    float amax = 0;
    for (float v : tile) amax = std::max(amax, std::fabs(v));
    const float scale = ue8m0_decode(fp8_tile_scale_code(amax));
    for (float& v : tile) v = e4m3_decode(fp8_tile_code(v, scale)) * scale;
  }
}

}  // namespace tandem
