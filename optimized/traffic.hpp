#pragma once
// Global-memory traffic classes and per-launch byte counts. Kernels tag every global access
// (optimized/kernel.cuh ld/st helpers); the emulator adds the bytes to the running launch. These
// counts are the ground truth the traffic simulator (sim/) must reproduce exactly.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

enum class Traffic : int {
  activation = 0,   // per-token tensors: residual streams, branch outputs, normalised inputs
  weight = 1,       // parameters (read by every block that needs them)
  coefficient = 2,  // small per-token mixing coefficients (pre/post/comb)
};
inline constexpr int kTrafficClasses = 3;
const char* traffic_name(Traffic t);

struct LaunchCounts {
  std::string kernel;
  std::array<uint64_t, kTrafficClasses> read{}, written{};

  uint64_t read_bytes(Traffic t) const { return read[static_cast<int>(t)]; }
  uint64_t written_bytes(Traffic t) const { return written[static_cast<int>(t)]; }
  uint64_t bytes(Traffic t) const { return read_bytes(t) + written_bytes(t); }
};

using LaunchLog = std::vector<LaunchCounts>;

}  // namespace tandem
