#include "problem/attention.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <tuple>

#include "core/error.hpp"
#include "core/tensor_checks.hpp"

namespace tandem {

void validate_attention_inputs(const AttentionInputs& in) {
  const int64_t T = in.q.shape.size() == 2 ? in.q.dim(0) : 0, d = T ? in.q.dim(1) : 0;
  if (T < 1 || d < 1 || in.heads < 1 || d % in.heads)
    throw_bad_input("attention input 'q': expected [T >= 1, d] with d a multiple of heads = {}",
                    in.heads);
  if (in.keys.shape.size() != 2 || in.keys.dim(1) != d || in.keys.dim(0) < T ||
      in.values.shape != in.keys.shape)
    throw_bad_input("attention inputs 'keys', 'values': expected [P + {}, {}] each", T, d);
  if (in.keys.dim(0) + d / in.heads > kAttentionMaxPositions)
    throw_bad_input("attention input 'keys': {} positions, at most {} (scores in shared memory)",
                    in.keys.dim(0), kAttentionMaxPositions - d / in.heads);
  for (const auto& [name, t] :
       {std::pair{"q", &in.q}, std::pair{"keys", &in.keys}, std::pair{"values", &in.values}})
    require_finite(*t, "attention input", name);
}

}  // namespace tandem
