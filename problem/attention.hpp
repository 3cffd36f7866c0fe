#pragma once
// Causal multi-head attention over a KV cache as data (the end-to-end model's
// attention sublayer, after its q/k/v projections): new token t sits at position P + t and
// attends to cached positions 0..P+t, o = softmax(q k^T / sqrt(hd)) v per head.
#include <cstdint>
#include <type_traits>

#include "core/tensor.hpp"
#include "problem/dtype.hpp"
#include "problem/traffic.hpp"

namespace tandem {

// The kernel keeps one score per position in shared memory.
inline constexpr int64_t kAttentionMaxPositions = 8192;

struct AttentionInputs {
  ActDType act = ActDType::f32;
  int heads = 1;
  Tensor<float> q;       // [T, d] the new tokens' queries (values of act)
  Tensor<float> keys;    // [P + T, d] the cache, the new tokens' keys last
  Tensor<float> values;  // [P + T, d]
};

// Every input tensor with its name (the golden blob's tensor names).
template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, AttentionInputs>
void for_each_tensor(Input& in, F&& f) {
  f("q", in.q);
  f("keys", in.keys);
  f("values", in.values);
}

struct AttentionOutputs {
  Tensor<float> o;  // [T, d] (values of act)
  LaunchLog launches;
};

// BadInput naming the tensor: shapes the kernel supports, valid values.
void validate_attention_inputs(const AttentionInputs& in);

}  // namespace tandem
