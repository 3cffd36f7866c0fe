#pragma once
// The emulator's global memory (host code: DeviceArray's, and tests). Defined in emu.cpp.
#include <cstddef>
#include <memory>

namespace tandem::emu {

// Global memory (DeviceArray's). Blocks of kPooledDeviceBytes or more are kept when freed, up to
// kDevicePoolBytes in all, and handed out again for a request of their size class, as a GPU
// framework's caching allocator keeps cudaMalloc's: at a release's widths a launch uploads GBs
// (a token's routed experts, a projection), and each fresh page costs the kernel's zeroing of it.
// A block's old contents stay: DeviceArray poisons or uploads over all of it.
inline constexpr size_t kPooledDeviceBytes = size_t{32} << 20;
inline constexpr size_t kDevicePoolBytes = size_t{2} << 30;
struct DeviceFree {
  size_t capacity;  // the block's size class
  void operator()(std::byte* p) const;
};
using DeviceBytes = std::unique_ptr<std::byte[], DeviceFree>;
DeviceBytes device_allocate(size_t bytes);
// The bytes the pool holds now (tests).
size_t device_pool_bytes();

}  // namespace tandem::emu
