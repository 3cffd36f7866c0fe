#pragma once
// Byte model of dense_rows, launch by launch; must equal the emulator's counts.
#include <cstdint>

#include "problem/dtype.hpp"
#include "problem/traffic.hpp"

namespace tandem::sim {

// T tokens: x[t] once, the whole weight [n_out, n_in / groups] (and the bias) once per token
// (one block per token, no reuse across tokens), y[t] once.
LaunchCounts predict_dense_rows(int64_t T, int64_t n_in, int64_t n_out, ActDType act,
                                bool bias = false, bool gelu = false, int64_t groups = 1);

}  // namespace tandem::sim
