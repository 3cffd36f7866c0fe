#include "sim/dense_traffic.hpp"

#include <string>

#include "problem/dense.hpp"

namespace tandem::sim {

LaunchCounts predict_dense_rows(int64_t T, int64_t n_in, int64_t n_out, ActDType act, bool bias,
                                bool gelu, int64_t groups) {
  constexpr int A = int(Traffic::activation), W = int(Traffic::weight);
  LaunchCounts c{launch_name("dense_rows", act, dense_epilogue_name(bias, gelu))};
  c.read[A] = uint64_t(T * n_in) * act_bytes(act);
  c.written[A] = uint64_t(T * n_out) * act_bytes(act);
  c.read[W] = uint64_t(T) * uint64_t(n_out * (n_in / groups + (bias ? 1 : 0))) * sizeof(float);
  return c;
}

}  // namespace tandem::sim
