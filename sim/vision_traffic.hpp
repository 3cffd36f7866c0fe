#pragma once
// Byte model of the vision kernels, launch by launch; must equal the emulator's counts exactly.
#include <cstdint>

#include "problem/dtype.hpp"
#include "problem/traffic.hpp"

namespace tandem::sim {

// unshuffle + inverse over an [h, w, C] grid, 2D RoPE over [n, heads, hd], the gate over [T, E]
// (`hashed` of the T routed by a tid2eid table).
LaunchLog predict_vision(int64_t h, int64_t w, int64_t C, int64_t n, int64_t heads, int64_t hd,
                         int64_t T, int64_t E, int64_t k, int64_t hashed, ActDType act);
// The unshuffle and its inverse over an [h, w, C] grid.
LaunchLog predict_unshuffle(int64_t h, int64_t w, int64_t C, ActDType act);
// The MoE gate alone: T tokens' router logits over E experts, top k kept; `hashed` of them text
// tokens taking their tid2eid row instead (MoeGateInputs::hashed_tokens).
LaunchCounts predict_moe_gate(int64_t T, int64_t E, int64_t k, int64_t hashed);

}  // namespace tandem::sim
