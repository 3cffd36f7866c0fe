#pragma once
// Byte model of the causal attention kernel; must equal the emulator's counts exactly.
#include <cstdint>

#include "problem/dtype.hpp"
#include "problem/traffic.hpp"

namespace tandem::sim {

// T new tokens after P cached positions, width d: each (token, head) block reads its query once
// and every visible key and value once (no reuse across blocks in this kernel).
LaunchLog predict_attention(int64_t T, int64_t P, int64_t d, ActDType act);

}  // namespace tandem::sim
