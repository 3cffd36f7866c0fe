#pragma once
// Dense rows as data: y[t] = W x[t] (+ b, then GELU when asked) for every token:
// the end-to-end model's projections (the query LoRA, the grouped output LoRA, index queries and
// weights, router logits, unembedding), the image's patch embedding and aligner, and the residual
// stack's sublayer stand-in. With G groups W is block-diagonal (the release's grouped wo_a): group
// g's n_out / G output rows read only its n_in / G inputs.
#include <cstdint>
#include <type_traits>

#include "core/device_limits.hpp"
#include "core/tensor.hpp"
#include "problem/dtype.hpp"
#include "problem/traffic.hpp"

namespace tandem {

// The kernel stages one input row in shared memory: past CUDA's default 48 KiB the launch opts
// into more, up to what sm_90 grants a block (58112 floats: 113 heads of 512, a 19370-wide
// model's three hidden states).
inline constexpr int64_t kDenseMaxInputs = int64_t(kMaxDynamicShared / sizeof(float));
// How dense_rows reads its weights, by shape (never by block size: the bits do not depend on it):
// rows of at least 128 inputs keep a warp's 32 lanes x 4 floats busy, one warp per output row;
// shorter rows would idle lanes, so a thread takes four output columns of the k-major weights.
inline constexpr int64_t kDenseWarpRowInputs = 128;
inline bool dense_kmajor(int64_t n_in) { return n_in < kDenseWarpRowInputs; }

struct DenseInputs {
  ActDType act = ActDType::f32;
  Tensor<float> x;     // [T, n_in] (values of act), n_in a multiple of one 16-byte pack
  Tensor<float> w;     // [n_out, n_in / groups]
  Tensor<float> bias;  // [n_out] or empty
  bool gelu = false;   // exact GELU (erf) after the bias
  int groups = 1;      // G >= 1 dividing n_in and n_out; G > 1 needs >= 128 inputs per group
};

// Every input tensor with its name (the golden blob's tensor names); the bias only when given.
template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, DenseInputs>
void for_each_tensor(Input& in, F&& f) {
  f("x", in.x);
  f("w", in.w);
  if (!in.bias.data.empty()) f("bias", in.bias);
}

struct DenseOutputs {
  Tensor<float> y;  // [T, n_out] (values of act)
  LaunchLog launches;
};

// The launch name's epilogue variant: "", "bias", "gelu" or "bias_gelu".
constexpr const char* dense_epilogue_name(bool bias, bool gelu) {
  return bias ? (gelu ? "bias_gelu" : "bias") : gelu ? "gelu" : "";
}

// BadInput naming the tensor: shapes the kernel supports, finite inputs.
void validate_dense_inputs(const DenseInputs& in);

}  // namespace tandem
