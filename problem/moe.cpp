#include "problem/moe.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/device_limits.hpp"
#include "core/error.hpp"
#include "core/tensor_checks.hpp"
#include "core/vision_config.hpp"

namespace tandem {

void validate_moe_expert_inputs(const MoeExpertInputs& in) {
  const int64_t T = in.y.shape.size() == 2 ? in.y.dim(0) : 0, d = T ? in.y.dim(1) : 0;
  if (T < 1 || d < 8 || d % 8 || d > 12288)
    throw_bad_input("moe experts input 'y': expected [T >= 1, d], d a multiple of 8 in [8, 12288]");
  const int64_t H = in.w_in.shape.size() == 3 ? in.w_in.dim(1) / 2 : 0;
  if (in.w_in.shape.size() != 3 || in.w_in.dim(2) != d || in.w_in.dim(1) != 2 * H ||
      H % kMoeHiddenStep || H < kMoeHiddenStep || H > kMoeMaxHidden)
    throw_bad_input(
        "moe experts input 'w_in': expected [E, 2H, {}] (gate rows, then up rows), H a multiple "
        "of {} in [{}, {}]",
        d, kMoeHiddenStep, kMoeHiddenStep, kMoeMaxHidden);
  const int64_t E = in.w_in.dim(0);
  static_assert(sizeof(float) * (2 * 12288 + kMoeMaxHidden) <= kMaxDynamicShared,
                "the kernel stages y, its sum and the hidden row: (2d + H) floats");
  if (in.w_out.shape != Shape{E, d, H})
    throw_bad_input("moe experts input 'w_out': expected [{}, {}, {}]", E, d, H);
  if (in.experts.shape.size() != 2 || in.experts.dim(0) != T || in.experts.dim(1) < 1 ||
      in.weights.shape != in.experts.shape)
    throw_bad_input("moe experts inputs 'experts', 'weights': expected [{}, k >= 1] each", T);
  const int64_t k = in.experts.dim(1);
  for (int64_t i = 0; i < in.experts.size(); ++i)
    if (in.experts.data[i] < 0 || in.experts.data[i] >= E)
      throw_bad_input("moe experts input 'experts'[{}, {}] is {}, outside [0, {})", i / k, i % k,
                      in.experts.data[i], E);
  require_finite(in.weights, "moe experts input", "weights");
}

}  // namespace tandem
