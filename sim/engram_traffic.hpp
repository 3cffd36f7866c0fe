#pragma once
// Byte model of the Engram kernels, launch by launch; must equal the emulator's counts exactly.
#include <cstdint>

#include "core/engram_config.hpp"
#include "problem/dtype.hpp"
#include "problem/traffic.hpp"

namespace tandem::sim {

// `marker_tokens`: positions with a negative id (image, DEAD) among `tokens`; they fetch rows
// unless cfg.skip_marker_lookups.
LaunchLog predict_engram_layer(const EngramConfig& cfg, int64_t tokens, int64_t marker_tokens,
                               ActDType act);

}  // namespace tandem::sim
