#pragma once
// The storage dtype of a component's activations: the kernels store f32 or bf16 and the host holds
// those values in float tensors (exactly representable). Its name, size, comparison dtype and
// rounding, in one place.
#include <cstddef>
#include <vector>

#include "core/compare.hpp"  // OutDType
#include "core/dtype.hpp"

namespace tandem {

enum class ActDType { f32, bf16 };

constexpr const char* act_dtype_name(ActDType a) { return a == ActDType::f32 ? "f32" : "bf16"; }
constexpr size_t act_bytes(ActDType a) { return a == ActDType::f32 ? 4 : 2; }
// The ActDType a kernel template's storage type Act stands for (float or bf16).
template <class Act>
constexpr ActDType act_dtype_of() {
  static_assert(sizeof(Act) == 4 || sizeof(Act) == 2, "activations are stored as f32 or bf16");
  return sizeof(Act) == 4 ? ActDType::f32 : ActDType::bf16;
}
// The dtype the tolerance policy's ulp_out is taken in for outputs stored as `a`.
constexpr OutDType out_dtype(ActDType a) {
  return a == ActDType::f32 ? OutDType::F32 : OutDType::BF16;
}

// A float rounded to `a`, as a kernel's store does.
inline float round_to(ActDType a, float v) {
  return a == ActDType::bf16 ? bf16_decode(bf16_encode(v)) : v;
}
inline void round_all_to(ActDType a, std::vector<float>& values) {
  for (float& v : values) v = round_to(a, v);
}

}  // namespace tandem
