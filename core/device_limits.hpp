#pragma once
// What one block may use on the kernels' target (sm_90: H100/H200); the emulator enforces the
// same, so a launch the GPU would refuse fails under emu too.
#include <cstddef>

namespace tandem {

// Dynamic shared memory per block without the opt-in attribute (cudaFuncSetAttribute with
// cudaFuncAttributeMaxDynamicSharedMemorySize), and the most it can grant on sm_90 (227 KiB).
inline constexpr size_t kDefaultDynamicShared = size_t{48} << 10;
inline constexpr size_t kMaxDynamicShared = 232448;

}  // namespace tandem
