#pragma once
// Global-memory traffic classes and per-launch byte counts. Kernels tag every global access
// (optimized/kernel.cuh ld/st helpers); the emulator adds the bytes to the running launch. These
// counts are the ground truth the traffic simulator (sim/) must reproduce exactly.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "problem/dtype.hpp"

namespace tandem {

enum class Traffic : int {
  activation = 0,   // per-token tensors: residual streams, branch outputs, normalised inputs
  weight = 1,       // parameters (read by every block that needs them)
  coefficient = 2,  // small per-token mixing coefficients (pre/post/comb), RoPE tables
  kv_cache = 3,     // KV cache records, compressor states and their scratch (DESIGN 5.5)
};
inline constexpr int kTrafficClasses = 4;

struct LaunchCounts {
  std::string kernel;
  std::array<uint64_t, kTrafficClasses> read{}, written{};

  uint64_t read_bytes(Traffic t) const { return read[static_cast<int>(t)]; }
  uint64_t written_bytes(Traffic t) const { return written[static_cast<int>(t)]; }
  uint64_t bytes(Traffic t) const { return read_bytes(t) + written_bytes(t); }
};

using LaunchLog = std::vector<LaunchCounts>;

// A launch's name as its launcher logs it and the simulator predicts it, one function for both:
// "kernel<act>" or "kernel<act,variant>".
inline std::string launch_name(std::string_view kernel, ActDType act,
                               std::string_view variant = {}) {
  std::string name(kernel);
  name += '<';
  name += act_dtype_name(act);
  if (!variant.empty()) name += ',', name += variant;
  return name + '>';
}

// The same launches (by name) moving the same bytes in every class, in the same order.
inline bool same_traffic(const LaunchLog& a, const LaunchLog& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].kernel != b[i].kernel || a[i].read != b[i].read || a[i].written != b[i].written)
      return false;
  return true;
}

}  // namespace tandem
