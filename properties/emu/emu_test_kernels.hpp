#pragma once
// Small kernels that exercise the emulator (built under TANDEM_EMU in emu_test_kernels.cpp),
// with host wrappers. Each runs one launch under `schedule` and returns its output.
#include <cstdint>
#include <vector>

#include "optimized/emu/schedule.hpp"
#include "problem/traffic.hpp"

namespace tandem::emu_test {

// out[i] = in[i] + in[(i+1) % n] through shared memory, WITHOUT a barrier between the write and
// the neighbour's read: a data race the schedules must expose.
std::vector<float> racy_neighbour_sum(const std::vector<float>& in, const emu::Schedule& s);
// The same with __syncthreads(): race-free.
std::vector<float> neighbour_sum(const std::vector<float>& in, const emu::Schedule& s);
// Per warp: butterfly sum (xor), broadcast of lane 3 (shfl) and shift by 1 (down), as integers.
struct WarpResults {
  std::vector<int> xor_sum, broadcast, down;
};
WarpResults warp_shuffles(const std::vector<int>& in, int block, const emu::Schedule& s);
// Every thread adds 1 to one global counter with atomicAdd; returns the counter.
int atomic_count(int grid, int block, const emu::Schedule& s);
// Block sums through dynamic shared memory of `block` ints; one output per block.
std::vector<int> dynamic_shared_block_sums(const std::vector<int>& in, int block,
                                           const emu::Schedule& s);
// Every thread writes its global linear id (2D grid of 2D blocks).
std::vector<int> thread_ids(unsigned gx, unsigned gy, unsigned bx, unsigned by,
                            const emu::Schedule& s);
// Copies n floats with 16-byte vector loads/stores; returns the launch's counts.
LaunchCounts vector_copy_counts(int n);
// A kernel where half the block waits at __syncthreads and half does not: must be reported.
void divergent_barrier();

}  // namespace tandem::emu_test
