#pragma once
// The KV cache's selection (DESIGN 5.5, issue 14): top-k of the indexer's scores per query
// token among the entries it can see (j < lengths[t], floor((t + 1) / r) for a token at
// position t). Ties go to the lower index (relu makes exact-zero ties common; -0 == +0), a row
// with fewer than k visible entries pads with -1, and scores past a row's length are never read.
// Output order: score descending, then index ascending.
#include <cstdint>
#include <type_traits>

#include "core/dtype.hpp"
#include "core/hd.hpp"
#include "core/tensor.hpp"
#include "problem/traffic.hpp"

namespace tandem {

// The kernel sorts its selection in shared memory: the release's largest is 2048 (V4.1's
// candidate blocks; top-k 512 and 1024 elsewhere).
inline constexpr int kTopkMax = 2048;

struct TopkInputs {
  Tensor<float> scores;     // [T, N]: finite where visible; anything past a row's length
  Tensor<int32_t> lengths;  // [T]: the entries row t sees, in [0, N]
  int top_k = 512;
};

template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, TopkInputs>
void for_each_tensor(Input& in, F&& f) {
  f("scores", in.scores);
  f("lengths", in.lengths);
}

struct TopkOutputs {
  Tensor<int32_t> indices;  // [T, top_k]: selected entries, best first, -1 padded
  LaunchLog launches;
};

// Scores as the kernel orders them: a larger score gives a larger key; -0 and +0 are one score
// (a tie, as the reference compares them). Every key of a finite score is above 0x007fffff.
TANDEM_HD inline uint32_t topk_order_key(float score) {
  const uint32_t b = float_bits(score == 0.0f ? 0.0f : score);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// BadInput naming the tensor: scores [T >= 1, N >= 1], finite within each row's length;
// lengths [T] in [0, N]; top_k in [1, kTopkMax].
void validate_topk_inputs(const TopkInputs& in);

}  // namespace tandem
