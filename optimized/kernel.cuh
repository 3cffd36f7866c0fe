#pragma once
// What every kernel source includes: the backend (real CUDA under nvcc, optimized/emu under the
// host compiler with TANDEM_EMU), the launch macro, tagged global loads/stores and reductions.
#include "core/device_limits.hpp"
#include "core/dtype.hpp"
#include "problem/traffic.hpp"

#if defined(TANDEM_EMU)
#include "optimized/emu/emu.hpp"
#define TANDEM_BACKEND_NS emu_backend
// Launches `kernel` (a function or function pointer) named `name` under the emulator.
#define TANDEM_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::tandem::emu::dynamic_shared())
#define TANDEM_LAUNCH(name, kernel, grid, block, smem, ...)                        \
  ::tandem::emu::launch(name, ::tandem::emu::kernel_id(kernel), grid, block, smem, \
                        [&] { kernel(__VA_ARGS__); })
// Lets `kernel` launch with up to `bytes` of dynamic shared memory (past kDefaultDynamicShared).
#define TANDEM_ALLOW_DYNAMIC_SHARED(kernel, bytes) \
  ::tandem::emu::set_max_dynamic_shared(::tandem::emu::kernel_id(kernel), bytes)
#else
#include <cuda_runtime.h>

#include "optimized/cuda_check.hpp"
#define TANDEM_BACKEND_NS cuda_backend
#define TANDEM_DYNAMIC_SHARED(T, name)                          \
  extern __shared__ __align__(16) unsigned char tandem_smem_[]; \
  T* name = reinterpret_cast<T*>(tandem_smem_)
#define TANDEM_LAUNCH(name, kernel, grid, block, smem, ...) \
  do {                                                      \
    (void)(name);                                           \
    kernel<<<grid, block, smem>>>(__VA_ARGS__);             \
    CUDA_CHECK(cudaGetLastError());                         \
  } while (0)
#define TANDEM_ALLOW_DYNAMIC_SHARED(kernel, bytes)                                     \
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, \
                                  static_cast<int>(bytes)))
#endif

// Inside the backend namespace: emu and cuda builds of the same source must not share symbols.
namespace tandem::TANDEM_BACKEND_NS {

inline constexpr int kWarpSize = 32;
inline constexpr int kMaxWarps = 32;  // 1024 threads per block

// ---- global memory, tagged by traffic class. On a GPU a plain (vectorised for uint4) access;
// under emu the bytes are added to the launch's counts.
template <class T>
__device__ __forceinline__ T ld(const T* p, Traffic c) {
#if defined(TANDEM_EMU)
  emu::count_bytes(c, false, sizeof(T));
  T v;
  __builtin_memcpy(static_cast<void*>(&v), p, sizeof(T));  // no aliasing assumptions on the host
  return v;
#else
  return *p;
#endif
}
template <class T>
__device__ __forceinline__ void st(T* p, const T& v, Traffic c) {
#if defined(TANDEM_EMU)
  emu::count_bytes(c, true, sizeof(T));
  __builtin_memcpy(static_cast<void*>(p), &v, sizeof(T));
#else
  *p = v;
#endif
}

// ---- storage dtypes: float or bf16 in memory, float in registers.
template <class Act>
__host__ __device__ __forceinline__ float to_float(Act v);
template <>
__host__ __device__ __forceinline__ float to_float<float>(float v) {
  return v;
}
template <>
__host__ __device__ __forceinline__ float to_float<bf16>(bf16 v) {
  return bf16_decode(v.bits);
}

template <class Act>
__host__ __device__ __forceinline__ Act from_float(float v);
template <>
__host__ __device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__host__ __device__ __forceinline__ bf16 from_float<bf16>(float v) {
  bf16 r;
  r.bits = bf16_encode(v);
  return r;
}

// One 16-byte vector of storage elements (4 floats or 8 bf16) per load/store.
template <class Act>
struct Pack {
  static_assert(16 % sizeof(Act) == 0, "a pack is one 16-byte vector access");
  static constexpr int N = 16 / sizeof(Act);

  __device__ __forceinline__ static void load(const Act* p, float (&out)[N], Traffic c) {
    const uint4 v = ld(reinterpret_cast<const uint4*>(p), c);
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
    if constexpr (sizeof(Act) == 4) {
#pragma unroll
      for (int i = 0; i < 4; ++i) out[i] = bits_float(w[i]);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        out[2 * i] = bf16_decode(static_cast<uint16_t>(w[i] & 0xffffu));
        out[2 * i + 1] = bf16_decode(static_cast<uint16_t>(w[i] >> 16));
      }
    }
  }
  // Rounds `in` to the storage dtype in place (so callers keep computing with what is stored),
  // then writes it.
  __device__ __forceinline__ static void store(Act* p, float (&in)[N], Traffic c) {
    unsigned w[4];
    if constexpr (sizeof(Act) == 4) {
#pragma unroll
      for (int i = 0; i < 4; ++i) w[i] = float_bits(in[i]);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint16_t lo = bf16_encode(in[2 * i]), hi = bf16_encode(in[2 * i + 1]);
        in[2 * i] = bf16_decode(lo), in[2 * i + 1] = bf16_decode(hi);
        w[i] = unsigned(lo) | unsigned(hi) << 16;
      }
    }
    st(reinterpret_cast<uint4*>(p), uint4{w[0], w[1], w[2], w[3]}, c);
  }
};

// Loads N consecutive floats (N a multiple of 4) with 16-byte vector loads.
template <int N>
__device__ __forceinline__ void load_floats(const float* p, float (&out)[N], Traffic c) {
  static_assert(N % 4 == 0, "float loads are 16-byte vectors");
#pragma unroll
  for (int v = 0; v < N / 4; ++v) {
    float part[4];
    Pack<float>::load(p + 4 * v, part, c);
#pragma unroll
    for (int i = 0; i < 4; ++i) out[4 * v + i] = part[i];
  }
}

// Loads N consecutive floats of 16-byte aligned shared memory with 16-byte vector loads (one
// 128-bit shared load in place of four; under emu one traced access in place of four).
template <int N>
__device__ __forceinline__ void lds_floats(const float* p, float (&out)[N]) {
  static_assert(N % 4 == 0, "shared float loads are 16-byte vectors");
#pragma unroll
  for (int v = 0; v < N / 4; ++v) {
#if defined(TANDEM_EMU)
    // One 16-byte load (a vector, as the GPU's; the emulator's shared memory is 8-byte aligned).
    using F4 = float __attribute__((vector_size(16), aligned(8)));
    F4 q;
    __builtin_memcpy(&q, p + 4 * v, 16);
    out[4 * v] = q[0], out[4 * v + 1] = q[1], out[4 * v + 2] = q[2], out[4 * v + 3] = q[3];
#else
    const float4 q = *reinterpret_cast<const float4*>(p + 4 * v);
    out[4 * v] = q.x, out[4 * v + 1] = q.y, out[4 * v + 2] = q.z, out[4 * v + 3] = q.w;
#endif
  }
}

// ---- reductions
// Every lane gets the warp's sum of v: a butterfly (xor offsets 16 .. 1). The emulator runs it
// as one exchange (emu::warp_butterfly_sum: the butterfly's sum bit for bit, four fewer fiber
// switches per lane); warp_sum_shuffles is the loop a GPU runs, and properties/emu runs it under
// the emulator too against warp_sum.
__device__ __forceinline__ float warp_sum_shuffles(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#if defined(TANDEM_EMU)
  return emu::warp_butterfly_sum(v);
#else
  return warp_sum_shuffles(v);
#endif
}

// One warp's dot product of a global weight row [n] (16-byte loads, lanes strided) with a vector
// staged in 16-byte aligned shared memory; every lane gets the sum. n must be a multiple of 4.
__device__ __forceinline__ float warp_row_dot(const float* __restrict__ row, const float* staged,
                                              int n) {
  float sum = 0.0f;
  for (int i = (threadIdx.x % kWarpSize) * 4; i < n; i += kWarpSize * 4) {
    float w[4], x[4];
    load_floats<4>(row + i, w, Traffic::weight);
    lds_floats<4>(staged + i, x);
#pragma unroll
    for (int k = 0; k < 4; ++k) sum += w[k] * x[k];
  }
  return warp_sum(sum);
}

// The k-major GEMVs sum their inputs in chunks of kKmajorChunk (each chunk's sum in k order,
// then the chunks' sums in order): a rounding path of about 8 + n / 8 additions rather than n,
// near the warp butterfly's (a long sequential sum only matches the tolerance policy's
// naive-order baseline, and exceeded twice its error in the specificity campaign).
inline constexpr int kKmajorChunk = 8;

// Four output channels c4..c4+3 of a GEMV with k-major weights: out[e] = sum_k staged[k]
// wt[k][c4 + e] (wt: [n, stride], stride a multiple of 4: the launchers' k_major). One 16-byte
// load per input, consecutive threads on consecutive channels (coalesced); no shuffles.
__device__ __forceinline__ void dot4_kmajor(const float* __restrict__ wt, const float* staged,
                                            int n, int stride, int c4, float (&out)[4]) {
  out[0] = out[1] = out[2] = out[3] = 0.0f;
  for (int k0 = 0; k0 < n; k0 += kKmajorChunk) {
    float chunk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k = k0; k < k0 + kKmajorChunk && k < n; ++k) {
      float w[4];
      load_floats<4>(wt + static_cast<size_t>(k) * stride + c4, w, Traffic::weight);
      const float x = staged[k];
#pragma unroll
      for (int e = 0; e < 4; ++e) chunk[e] += x * w[e];
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) out[e] += chunk[e];
  }
}
// The same for a last group of fewer than four channels (c4 .. rows - 1): 4-byte loads of those.
__device__ __forceinline__ void dot_tail_kmajor(const float* __restrict__ wt, const float* staged,
                                                int n, int stride, int c4, int rows,
                                                float (&out)[4]) {
  out[0] = out[1] = out[2] = out[3] = 0.0f;
  for (int k0 = 0; k0 < n; k0 += kKmajorChunk) {
    float chunk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k = k0; k < k0 + kKmajorChunk && k < n; ++k) {
      const float x = staged[k];
      for (int e = 0; c4 + e < rows; ++e)
        chunk[e] += x * ld(wt + static_cast<size_t>(k) * stride + c4 + e, Traffic::weight);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) out[e] += chunk[e];
  }
}

// Sums K values over the block; every thread gets the totals. Fixed order: warp butterfly, then
// the warps' partials in warp order, so the result does not depend on scheduling.
// `scratch` is shared memory of kMaxWarps * K floats. blockDim.x must be a multiple of 32.
template <int K>
__device__ __forceinline__ void block_sum(float (&v)[K], float* scratch) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int warps = blockDim.x / kWarpSize;
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_sum(v[k]);
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < K; ++k) scratch[warp * K + k] = v[k];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += scratch[w * K + k];
    v[k] = total;
  }
  __syncthreads();  // scratch may be reused after this
}

// The warp's maximum of v (exact in any order); every lane gets it. As warp_sum: one exchange
// under the emulator (emu::warp_butterfly_max), the shuffles (warp_max_shuffles) on a GPU.
__device__ __forceinline__ float warp_max_shuffles(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#if defined(TANDEM_EMU)
  return emu::warp_butterfly_max(v);
#else
  return warp_max_shuffles(v);
#endif
}

// The block's maximum of v (exact in any order); every thread gets it. `scratch`: kMaxWarps
// floats of shared memory.
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  for (int w = 0; w < int(blockDim.x / kWarpSize); ++w) v = fmaxf(v, scratch[w]);
  __syncthreads();  // scratch may be reused after this
  return v;
}

}  // namespace tandem::TANDEM_BACKEND_NS
