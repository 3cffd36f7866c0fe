// Test kernels for the emulator: CUDA source compiled by the host compiler (TANDEM_EMU).
#include "emu_test_kernels.hpp"

#include "optimized/device_array.cuh"
#include "optimized/kernel.cuh"
#include "optimized/moe.cuh"

namespace tandem::emu_test {
namespace {

using namespace tandem::emu_backend;

constexpr int kMaxBlock = 256;

__global__ void racy_neighbour_sum_kernel(const float* in, float* out, int n) {
  __shared__ float s[kMaxBlock];
  const int i = threadIdx.x, at = blockIdx.x * n + i;
  s[i] = ld(in + at, Traffic::activation);
  // BUG (deliberate): no __syncthreads() here.
  st(out + at, s[i] + s[(i + 1) % n], Traffic::activation);
}

// The racy sum through dynamic shared memory, which every block starts with poisoned.
__global__ void racy_dynamic_neighbour_sum_kernel(const float* in, float* out, int n) {
  TANDEM_DYNAMIC_SHARED(float, s);
  const int i = threadIdx.x, at = blockIdx.x * n + i;
  s[i] = ld(in + at, Traffic::activation);
  // BUG (deliberate): no __syncthreads() here.
  st(out + at, s[i] + s[(i + 1) % n], Traffic::activation);
}

__global__ void neighbour_sum_kernel(const float* in, float* out, int n) {
  __shared__ float s[kMaxBlock];
  const int i = threadIdx.x, at = blockIdx.x * n + i;
  s[i] = ld(in + at, Traffic::activation);
  __syncthreads();
  st(out + at, s[i] + s[(i + 1) % n], Traffic::activation);
}

__global__ void warp_shuffle_kernel(const int* in, int* xor_sum, int* broadcast, int* down) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int v = ld(in + i, Traffic::activation);
  int s = v;
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  st(xor_sum + i, s, Traffic::activation);
  st(broadcast + i, __shfl_sync(0xffffffffu, v, 3), Traffic::activation);
  st(down + i, __shfl_down_sync(0xffffffffu, v, 1), Traffic::activation);
}

// Three reductions in a row, each of values made from the one before (the third meets on the
// first's exchange half, where a result kept from it would show).
template <class Reduce>
float three_reductions(float v, Reduce reduce) {
  const float x = reduce(v);
  const float y = reduce(0.5f * v + x);
  return reduce(y - v);
}

__global__ void warp_reductions_kernel(const float* in, float* one_exchange, float* shuffles,
                                       bool max) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const float v = ld(in + i, Traffic::activation);
  st(one_exchange + i,
     max ? three_reductions(v, [](float a) { return warp_max(a); })
         : three_reductions(v, [](float a) { return warp_sum(a); }),
     Traffic::activation);
  st(shuffles + i,
     max ? three_reductions(v, [](float a) { return warp_max_shuffles(a); })
         : three_reductions(v, [](float a) { return warp_sum_shuffles(a); }),
     Traffic::activation);
}

__global__ void atomic_count_kernel(int* counter) { atomicAdd(counter, 1); }

// The block's sum of its slice of `in` through shared memory `s` [blockDim.x].
__device__ void block_sum(int* s, const int* in, int* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = ld(in + i, Traffic::activation);
  __syncthreads();
  if (threadIdx.x == 0) {
    int sum = 0;
    for (unsigned k = 0; k < blockDim.x; ++k) sum += s[k];
    st(out + blockIdx.x, sum, Traffic::activation);
  }
}

__global__ void dynamic_shared_kernel(const int* in, int* out) {
  TANDEM_DYNAMIC_SHARED(int, s);
  block_sum(s, in, out);
}

__global__ void static_shared_kernel(const int* in, int* out) {
  __shared__ int s[kMaxBlock];
  block_sum(s, in, out);
}

__global__ void thread_id_kernel(int* out) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  st(out + y * (gridDim.x * blockDim.x) + x, y * int(gridDim.x * blockDim.x) + x,
     Traffic::activation);
}

__global__ void vector_copy_kernel(const float* in, float* out, int n) {
  const int i = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) {
    float v[4];
    Pack<float>::load(in + i, v, Traffic::activation);
    Pack<float>::store(out + i, v, Traffic::activation);
  }
}

// BUG (deliberate, for a shift other than 0): an index one element outside an array.
__global__ void shifted_copy_kernel(const float* in, float* out, Overrun o, int shift) {
  const int i = threadIdx.x;
  if (o == Overrun::read)
    st(out + i, ld(in + i + shift, Traffic::activation), Traffic::activation);
  else
    st(out + i + shift, ld(in + i, Traffic::activation), Traffic::activation);
}

__global__ void divergent_barrier_kernel() {
  if (threadIdx.x < 16)
    __syncthreads();
  else
    (void)__shfl_sync(0xffffffffu, 1, 0);
}

__global__ void hazard_pattern_kernel(Pattern pattern, int* out) {
  __shared__ int s[kHazardBlock];
  __shared__ int unwritten[kHazardBlock];
  TANDEM_DYNAMIC_SHARED(int, dynamic);
  const int id = threadIdx.x, lane = id % kWarpSize;
  s[id] = id;
  __syncthreads();
  int got = 0;
  switch (pattern) {
    case Pattern::missing_barrier:
      if (id == 0) s[1] = 7;
      if (id == 1) got = s[1];
      break;
    case Pattern::write_write:
      if (id == 0 || id == 33) s[5] = id;
      break;
    case Pattern::many_readers_one_writer:
      got = s[0];
      if (id == 5) s[0] = 9;
      break;
    case Pattern::missing_syncwarp:
    case Pattern::syncwarp:
    case Pattern::syncwarp_across_warps:
      if (id == 0) s[2] = 7;
      if (pattern != Pattern::missing_syncwarp) __syncwarp();
      if (id == (pattern == Pattern::syncwarp_across_warps ? 32 : 1)) got = s[2];
      break;
    case Pattern::warp_reads_then_syncwarp:
      if (id < kWarpSize) got = s[0];
      __syncwarp();
      if (id == 0) s[0] = 9;
      break;
    case Pattern::shuffle_is_no_fence:
      if (id == 0) s[2] = 7;
      got = __shfl_sync(0xffffffffu, lane, 0);
      if (id == 1) got = s[2];
      break;
    case Pattern::atomics:
      atomicAdd(&s[0], 1);
      __syncthreads();
      got = s[0];
      break;
    case Pattern::atomic_after_plain:
      if (id == 0)
        s[0] = 100;
      else
        atomicAdd(&s[0], 1);
      break;
    case Pattern::uninitialized_static:
      got = unwritten[kHazardBlock - 1 - id];
      break;
    case Pattern::uninitialized_dynamic:
      got = dynamic[kHazardBlock - 1 - id];
      break;
    case Pattern::atomics_then_syncwarp:
      if (id < 2) atomicAdd(&s[0], 1);
      __syncwarp();
      if (id == 0) got = s[0];
      break;
    case Pattern::read_after_atomics:
      if (id == 0 || id == 33) atomicAdd(&s[0], 1);
      if (id == 40) got = s[0];
      break;
    case Pattern::dynamic_overrun:
      if (id == 0) got = dynamic[kHazardBlock + 1];
      break;
    case Pattern::reread_around_a_byte_write:
      if (id < kWarpSize) got = s[1];
      if (id == 33) reinterpret_cast<unsigned char*>(s + 1)[1] = 1;
      got += __shfl_sync(0xffffffffu, lane, 0);
      if (id < kWarpSize) {
        const volatile int* twice = s + 1;  // read twice, not once
        got += *twice;
        got += *twice;
      }
      break;
    case Pattern::reread_after_syncwarp_then_write:
      if (id < kWarpSize) got = s[0];
      __syncwarp();
      if (id < kWarpSize) got += s[0];
      if (id == 0) s[0] = 9;
      break;
    case Pattern::bytes_of_one_word:
      if (id < 4) reinterpret_cast<unsigned char*>(s + 3)[id] = static_cast<unsigned char>(id);
      break;
    case Pattern::byte_write_then_word_read:
      if (id == 0) reinterpret_cast<unsigned char*>(s + 4)[3] = 1;
      if (id == 1) got = s[4];
      break;
    case Pattern::word_write_then_byte_write:
      if (id == 0) s[6] = 9;
      if (id == 33) reinterpret_cast<unsigned char*>(s + 6)[1] = 1;
      break;
    case Pattern::previous_block:
      if (blockIdx.x == 0) unwritten[id] = id;
      __syncthreads();
      got = unwritten[(id + 1) % kHazardBlock];
      break;
  }
  __syncthreads();
  if (blockIdx.x == 0) st(out + id, s[id] + got, Traffic::activation);
}

enum class Neighbour { racy, racy_dynamic, synced };

std::vector<float> neighbour(const std::vector<float>& in, const emu::Schedule& s, Neighbour k,
                             int blocks) {
  emu::set_schedule(s);
  std::vector<float> out(in.size(), NAN);
  const int n = static_cast<int>(in.size()) / blocks;
  auto kernel = k == Neighbour::racy           ? racy_neighbour_sum_kernel
                : k == Neighbour::racy_dynamic ? racy_dynamic_neighbour_sum_kernel
                                               : neighbour_sum_kernel;
  const size_t smem = k == Neighbour::racy_dynamic ? n * sizeof(float) : 0;
  TANDEM_LAUNCH("neighbour_sum", kernel, dim3(unsigned(blocks)), dim3(n), smem, in.data(),
                out.data(), n);
  emu::take_launch_log();
  return out;
}

}  // namespace

std::vector<float> racy_neighbour_sum(const std::vector<float>& in, const emu::Schedule& s,
                                      int blocks) {
  return neighbour(in, s, Neighbour::racy, blocks);
}
std::vector<float> racy_dynamic_neighbour_sum(const std::vector<float>& in, const emu::Schedule& s,
                                              int blocks) {
  return neighbour(in, s, Neighbour::racy_dynamic, blocks);
}
std::vector<float> neighbour_sum(const std::vector<float>& in, const emu::Schedule& s) {
  return neighbour(in, s, Neighbour::synced, 1);
}

WarpResults warp_shuffles(const std::vector<int>& in, int block, const emu::Schedule& s) {
  emu::set_schedule(s);
  const size_t n = in.size();
  WarpResults r{std::vector<int>(n), std::vector<int>(n), std::vector<int>(n)};
  TANDEM_LAUNCH("warp_shuffle", warp_shuffle_kernel, dim3(unsigned(n) / block), dim3(block), 0,
                in.data(), r.xor_sum.data(), r.broadcast.data(), r.down.data());
  emu::take_launch_log();
  return r;
}

WarpReductions warp_reductions(const std::vector<float>& in, int block, bool max,
                               const emu::Schedule& s) {
  emu::set_schedule(s);
  const size_t n = in.size();
  WarpReductions r{std::vector<float>(n, NAN), std::vector<float>(n, NAN)};
  TANDEM_LAUNCH("warp_reductions", warp_reductions_kernel, dim3(unsigned(n) / block), dim3(block),
                0, in.data(), r.one_exchange.data(), r.shuffles.data(), max);
  emu::take_launch_log();
  return r;
}

int atomic_count(int grid, int block, const emu::Schedule& s) {
  emu::set_schedule(s);
  int counter = 0;
  TANDEM_LAUNCH("atomic_count", atomic_count_kernel, dim3(grid), dim3(block), 0, &counter);
  emu::take_launch_log();
  return counter;
}

std::vector<int> dynamic_shared_block_sums(const std::vector<int>& in, int block,
                                           const emu::Schedule& s) {
  emu::set_schedule(s);
  std::vector<int> out(in.size() / block, -1);
  TANDEM_LAUNCH("dynamic_shared", dynamic_shared_kernel, dim3(unsigned(out.size())), dim3(block),
                block * sizeof(int), in.data(), out.data());
  emu::take_launch_log();
  return out;
}

std::vector<int> static_shared_block_sums(const std::vector<int>& in, int block,
                                          const emu::Schedule& s) {
  emu::set_schedule(s);
  std::vector<int> out(in.size() / block, -1);
  TANDEM_LAUNCH("static_shared", static_shared_kernel, dim3(unsigned(out.size())), dim3(block), 0,
                in.data(), out.data());
  emu::take_launch_log();
  return out;
}

int dynamic_shared_sum(size_t smem, size_t allow) {
  emu::set_schedule({});
  std::vector<int> in(64, 1);
  int out = -1;
  TANDEM_ALLOW_DYNAMIC_SHARED(dynamic_shared_kernel, allow ? allow : kDefaultDynamicShared);
  TANDEM_LAUNCH("dynamic_shared", dynamic_shared_kernel, dim3(1), dim3(64), smem, in.data(), &out);
  emu::take_launch_log();
  return out;
}

std::vector<int> thread_ids(unsigned gx, unsigned gy, unsigned bx, unsigned by,
                            const emu::Schedule& s) {
  emu::set_schedule(s);
  std::vector<int> out(gx * gy * bx * by, -1);
  TANDEM_LAUNCH("thread_ids", thread_id_kernel, dim3(gx, gy), dim3(bx, by), 0, out.data());
  emu::take_launch_log();
  return out;
}

LaunchCounts vector_copy_counts(int n) {
  emu::set_schedule({});
  std::vector<float> in(n, 1.0f), out(n);
  const int threads = 64, blocks = (n / 4 + threads - 1) / threads;
  TANDEM_LAUNCH("vector_copy", vector_copy_kernel, dim3(blocks), dim3(threads), 0, in.data(),
                out.data(), n);
  return emu::take_launch_log().at(0);
}

std::vector<float> shifted_copy(const std::vector<float>& in, Overrun o, int shift, bool download) {
  emu::set_schedule({});
  DeviceArray<float> device_in(in.size()), device_out(in.size());
  device_in.upload(in);
  TANDEM_LAUNCH("shifted_copy", shifted_copy_kernel, dim3(1), dim3(unsigned(in.size())), 0,
                device_in.data(), device_out.data(), o, shift);
  emu::take_launch_log();
  return download ? device_out.download() : std::vector<float>{};
}

std::vector<int> pattern_values(Pattern p, const emu::Schedule& s) {
  emu::set_schedule(s);
  std::vector<int> out(kHazardBlock, -1);
  TANDEM_LAUNCH("hazard_pattern", hazard_pattern_kernel, dim3(2), dim3(kHazardBlock),
                kHazardBlock * sizeof(int), p, out.data());
  emu::take_launch_log();
  return out;
}

std::optional<emu::Hazard> hazard_of(Pattern p, const emu::Schedule& s) {
  try {
    pattern_values(p, s);
  } catch (const emu::HazardError& e) {
    return e.first();
  }
  return std::nullopt;
}

uint64_t hazard_count_of(Pattern p, const emu::Schedule& s) {
  try {
    pattern_values(p, s);
  } catch (const emu::HazardError& e) {
    return e.count();
  }
  return 0;
}

void divergent_barrier() {
  emu::set_schedule({});
  TANDEM_LAUNCH("divergent_barrier", divergent_barrier_kernel, dim3(1), dim3(32), 0);
}

std::vector<float> moe_one_expert(const std::vector<float>& y, int32_t expert, const float* w_in,
                                  const float* w_out, int H) {
  emu::set_schedule({});
  const int d = int(y.size());
  const float weight = 1.0f;
  std::vector<float> f(y.size(), NAN);
  const size_t smem = sizeof(float) * (2 * size_t(d) + size_t(H));
  TANDEM_ALLOW_DYNAMIC_SHARED(moe_experts_weighted<float>, smem);
  TANDEM_LAUNCH("moe_experts_weighted", moe_experts_weighted<float>, dim3(1), dim3(256), smem,
                y.data(), &expert, &weight, w_in, w_out, d, H, 1, f.data());
  emu::take_launch_log();
  return f;
}

}  // namespace tandem::emu_test
