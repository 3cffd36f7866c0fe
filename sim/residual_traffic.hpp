#pragma once
// Byte model of the residual kernels (DESIGN 5.1 / 6), launch by launch. It must equal the
// emulator's counts exactly (properties/residual_traffic_props.cpp).
#include <cstdint>

#include "problem/residual.hpp"
#include "problem/traffic.hpp"

namespace tandem::sim {

// The launches run_residual_stack makes for a stack of `sites` sites over `tokens` tokens, in
// order, with the bytes each moves per traffic class.
LaunchLog predict_residual_stack(ResidualPath path, int64_t tokens, int64_t d, int sites,
                                 ActDType act);

// The launch run_residual_boundary makes (see optimized/residual.hpp): residual_post when it
// only closes (open = false), else residual_single_pass (<act,boundary|last|open>).
LaunchCounts predict_residual_boundary(int64_t tokens, int64_t d, ActDType act, bool close,
                                       bool carried_pre, bool open, bool mixes);

// The launch run_rms_norm_rows makes: residual_rmsnorm over `tokens` rows of d (the gain's d
// floats read per row when there is one).
LaunchCounts predict_rms_norm_rows(int64_t tokens, int64_t d, ActDType act, bool gain = true);

// Activation elements per token per site of each schedule (in units of d).
inline constexpr int kResidualV4Unfused = 20, kResidualV4NormFolded = 14,
                     kResidualV41SinglePass = 10;

}  // namespace tandem::sim
