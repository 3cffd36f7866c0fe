#pragma once
// Byte model of the Engram kernels, launch by launch; must equal the emulator's counts exactly.
#include <cstdint>

#include "core/engram_config.hpp"
#include "optimized/residual.hpp"  // ActDType
#include "optimized/traffic.hpp"

namespace tandem::sim {

// `lookup_tokens`: positions with a lookup (non-negative ids) among `tokens`.
LaunchLog predict_engram_layer(const EngramConfig& cfg, int64_t tokens, int64_t lookup_tokens,
                               ActDType act);

}  // namespace tandem::sim
