#pragma once
// Byte model of the MoE expert kernel, launch by launch; must equal the emulator's counts.
#include <cstdint>

#include "problem/dtype.hpp"
#include "problem/traffic.hpp"

namespace tandem::sim {

// T tokens of width d, k experts each of hidden width H: y once, each selected expert's three
// matrices (gate, up, out) once per token (no reuse across tokens in this kernel), f once.
LaunchLog predict_moe_experts(int64_t T, int64_t d, int64_t H, int64_t k, ActDType act);

}  // namespace tandem::sim
