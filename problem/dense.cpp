#include "problem/dense.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/error.hpp"
#include "core/tensor_checks.hpp"

namespace tandem {

void validate_dense_inputs(const DenseInputs& in) {
  const int64_t pack = 16 / int64_t(act_bytes(in.act));  // one 16-byte load of activations
  if (in.x.shape.size() != 2 || in.x.dim(0) < 1 || in.x.dim(1) < pack || in.x.dim(1) % pack ||
      in.x.dim(1) > kDenseMaxInputs)
    throw_bad_input(
        "dense input 'x': expected [T >= 1, n_in], n_in a multiple of {} ({}) in "
        "[{}, {}]",
        pack, act_dtype_name(in.act), pack, kDenseMaxInputs);
  const int64_t G = in.groups, n_in = in.x.dim(1);
  // A group's inputs are one row the warp-per-row path reads with 16-byte loads (dense.cuh).
  if (G < 1 || (G > 1 && (n_in % G || n_in / G % pack || dense_kmajor(n_in / G))))
    throw_bad_input(
        "dense groups {}: must be >= 1, and more than 1 only where each group's share of the {} "
        "inputs is a multiple of {} and at least {}",
        G, n_in, pack, kDenseWarpRowInputs);
  if (in.w.shape.size() != 2 || in.w.dim(1) != n_in / G || in.w.dim(0) < 1 || in.w.dim(0) % G ||
      in.w.dim(0) > (int64_t{1} << 24))
    throw_bad_input("dense input 'w': expected [n_out in [1, 2^24], a multiple of {} groups, {}]",
                    G, n_in / G);
  if (!in.bias.data.empty() && in.bias.shape != Shape{in.w.dim(0)})
    throw_bad_input("dense input 'bias': expected [{}] or empty", in.w.dim(0));
  require_finite(in.x, "dense input", "x");
}

}  // namespace tandem
