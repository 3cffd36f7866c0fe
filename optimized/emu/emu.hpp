#pragma once
// CUDA-semantics layer for running kernel source on the CPU (DESIGN section 3). Included by
// optimized/kernel.cuh when TANDEM_EMU is defined; never by host code. A block's threads are
// fibers (Boost.Context) scheduled cooperatively: they switch only at __syncthreads and warp
// shuffles, in the order the current emu::Schedule gives.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>

#include "optimized/emu/hazard.hpp"
#include "optimized/emu/schedule.hpp"
#include "problem/traffic.hpp"

#if defined(TANDEM_HAVE_CUDA_HEADERS)
#include <vector_types.h>  // CUDA's own host-usable uint3/uint4/dim3
#else
struct uint3 {
  unsigned x, y, z;
};
struct uint4 {
  unsigned x, y, z, w;
};
struct uint2 {
  unsigned x, y;
};
struct float2 {
  float x, y;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
#endif

// CUDA's host_defines.h gives these other meanings for host compilers: replace them.
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// One instance per kernel and host thread (a host thread runs one block at a time; launches and
// blocks on other host threads have their own), all of them in one thread-local linker section
// so that the emulator can find a thread's instances, poison them before every launch and watch
// them for hazards (emu.cpp). `used`: the optimizer must keep every access (a static whose
// address never escapes would otherwise be folded: an unwritten field read as its zero
// initializer, untraced).
#define __shared__ __attribute__((section("tandem_shared"), used)) static thread_local
#define __launch_bounds__(...)

namespace tandem::emu {

struct Builtins {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
};

const Builtins& builtins();
void syncthreads();
// __syncwarp: a full-warp barrier that also orders the warp's shared-memory accesses (a shuffle
// exchanges registers only).
void syncwarp(unsigned mask);
// Exchanges one 64-bit word per lane across the calling thread's full warp; returns the word
// lane `src` contributed. All 32 lanes must take part (DESIGN: full-warp shuffles only).
uint64_t warp_exchange(uint64_t word, unsigned src, unsigned mask);
// kernel.cuh's warp_sum and warp_max (butterflies of __shfl_xor_sync at offsets 16, 8, 4, 2, 1:
// v = v + partner, v = fmaxf(v, partner)) in one exchange instead of five: every lane deposits v
// and computes the butterfly's result from the 32 deposits with the same operations in the same
// tree, so it is the shuffles' bit for bit: for the sum lane 0's path (float addition commutes, so
// every lane ends with that sum; a NaN's payload may differ), for the max the calling lane's own
// path (fmaxf of +0 and -0 need not commute). The shuffle loops themselves still run under emu in
// properties/emu (Emu.WarpReductions...).
float warp_butterfly_sum(float v);
float warp_butterfly_max(float v);
void* dynamic_shared();
void count_bytes(Traffic c, bool write, uint64_t bytes);
// Atomic read-modify-writes, done in emu.cpp where accesses are not traced: the hazard detector
// sees each as one atomic access (atomics do not race with each other, only with plain accesses).
int atomic_add(int* p, int v);
unsigned atomic_add(unsigned* p, unsigned v);
float atomic_add(float* p, float v);

// The schedule for launches from this host thread.
void set_schedule(const Schedule& s);

// `fn` identifies the kernel function (for its dynamic shared memory attribute).
void launch(const char* kernel, const void* fn, dim3 grid, dim3 block, size_t dynamic_smem,
            const std::function<void()>& body);
// cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes): launches of `fn`
// may then use up to `bytes` of dynamic shared memory (at most kMaxDynamicShared).
void set_max_dynamic_shared(const void* fn, size_t bytes);
template <class F>
const void* kernel_id(F* fn) {
  return reinterpret_cast<const void*>(fn);
}
// The byte counts of every launch since the last call (per host thread).
LaunchLog take_launch_log();

template <class T>
T shuffle(unsigned mask, T v, unsigned src) {
  static_assert(sizeof(T) <= 8, "emu shuffles move at most 64 bits");
  uint64_t w = 0;
  __builtin_memcpy(&w, &v, sizeof(T));
  w = warp_exchange(w, src, mask);
  __builtin_memcpy(&v, &w, sizeof(T));
  return v;
}
inline unsigned lane_id() { return builtins().thread_idx.x % 32; }

}  // namespace tandem::emu

#define threadIdx (::tandem::emu::builtins().thread_idx)
#define blockIdx (::tandem::emu::builtins().block_idx)
#define blockDim (::tandem::emu::builtins().block_dim)
#define gridDim (::tandem::emu::builtins().grid_dim)

inline void __syncthreads() { ::tandem::emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::tandem::emu::syncwarp(mask); }
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const unsigned lane = ::tandem::emu::lane_id();
  return ::tandem::emu::shuffle(mask, v, (lane & ~unsigned(width - 1)) + (unsigned(src) % width));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const unsigned lane = ::tandem::emu::lane_id();
  const unsigned src = lane ^ unsigned(lane_mask);
  return ::tandem::emu::shuffle(mask, v, src / width == lane / width ? src : lane);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const unsigned lane = ::tandem::emu::lane_id();
  const unsigned src = lane + delta;
  return ::tandem::emu::shuffle(mask, v, src / width == lane / width ? src : lane);
}
template <class T>
T atomicAdd(T* p, T v) {
  return ::tandem::emu::atomic_add(p, v);
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
