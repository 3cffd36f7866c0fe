#pragma once
// Small kernels that exercise the emulator (built under TANDEM_EMU in emu_test_kernels.cpp),
// with host wrappers. Each runs one launch under `schedule` and returns its output.
#include <cstdint>
#include <optional>
#include <vector>

#include "optimized/emu/hazard.hpp"
#include "optimized/emu/schedule.hpp"
#include "problem/traffic.hpp"

namespace tandem::emu_test {

// out[i] = in[i] + in[(i+1) % n] through shared memory, WITHOUT a barrier between the write and
// the neighbour's read: a data race the schedules must expose. `blocks` blocks, each of
// in.size() / blocks threads summing its own slice.
std::vector<float> racy_neighbour_sum(const std::vector<float>& in, const emu::Schedule& s,
                                      int blocks = 1);
// The same through dynamic shared memory, which each block starts with poisoned (NaN): what a
// block computes follows its own thread order only, not what an earlier block left.
std::vector<float> racy_dynamic_neighbour_sum(const std::vector<float>& in, const emu::Schedule& s,
                                              int blocks);
// The same with __syncthreads(): race-free.
std::vector<float> neighbour_sum(const std::vector<float>& in, const emu::Schedule& s);
// Per warp: butterfly sum (xor), broadcast of lane 3 (shfl) and shift by 1 (down), as integers.
struct WarpResults {
  std::vector<int> xor_sum, broadcast, down;
};
WarpResults warp_shuffles(const std::vector<int>& in, int block, const emu::Schedule& s);
// Per thread: three of kernel.cuh's warp_sum or (max) warp_max in a row (under emu one exchange
// each) and the same with warp_sum_shuffles / warp_max_shuffles (the butterfly of shuffles a GPU
// runs), of its warp's values and then of values made from each result.
struct WarpReductions {
  std::vector<float> one_exchange, shuffles;
};
WarpReductions warp_reductions(const std::vector<float>& in, int block, bool max,
                               const emu::Schedule& s);
// Every thread adds 1 to one global counter with atomicAdd; returns the counter.
int atomic_count(int grid, int block, const emu::Schedule& s);
// Block sums through dynamic shared memory of `block` ints; one output per block.
std::vector<int> dynamic_shared_block_sums(const std::vector<int>& in, int block,
                                           const emu::Schedule& s);
// The same through a static __shared__ array (block <= 256).
std::vector<int> static_shared_block_sums(const std::vector<int>& in, int block,
                                          const emu::Schedule& s);
// The same sums (64 threads, one block) with `smem` bytes of dynamic shared memory, the kernel's
// attribute set to `allow` bytes first (cudaFuncSetAttribute; 0: back to the default).
int dynamic_shared_sum(size_t smem, size_t allow);
// Every thread writes its global linear id (2D grid of 2D blocks).
std::vector<int> thread_ids(unsigned gx, unsigned gy, unsigned bx, unsigned by,
                            const emu::Schedule& s);
// Copies n floats with 16-byte vector loads/stores; returns the launch's counts.
LaunchCounts vector_copy_counts(int n);
// One block of in.size() threads copying through device arrays (optimized/device_array.cuh):
// out[i] = in[i + shift] (Overrun::read) or out[i + shift] = in[i] (Overrun::write); returns out
// downloaded, or with download false drops it unread (its guards checked as it dies).
enum class Overrun { read, write };
std::vector<float> shifted_copy(const std::vector<float>& in, Overrun o, int shift,
                                bool download = true);
// A kernel where half the block waits at __syncthreads and half does not: must be reported.
void divergent_barrier();

// optimized/moe.cuh's moe_experts_weighted<float> for one token y [d] routed to `expert` alone
// with weight 1, the weights given as raw pointers (w_in [> expert, H, d], w_out [> expert, d, H]:
// only that expert's rows are read); returns f [d].
std::vector<float> moe_one_expert(const std::vector<float>& y, int32_t expert, const float* w_in,
                                  const float* w_out, int H);

// Shared-memory access patterns for the hazard detector, each in a 64-thread block (two warps)
// whose shared ints s[64] every thread first sets to its id, behind a barrier.
enum class Pattern {
  missing_barrier,           // thread 0 writes s[1], thread 1 reads it
  write_write,               // threads 0 and 33 write s[5]
  many_readers_one_writer,   // every thread reads s[0], then thread 5 writes it
  missing_syncwarp,          // lane 0 writes s[2], lane 1 reads it
  syncwarp,                  // the same with __syncwarp between: race-free
  syncwarp_across_warps,     // thread 0 writes s[2], __syncwarp, thread 32 reads it
  warp_reads_then_syncwarp,  // warp 0 reads s[0], __syncwarp, lane 0 writes it: race-free
  shuffle_is_no_fence,       // lane 0 writes s[2], a shuffle, lane 1 reads it
  atomics,                   // every thread atomicAdd(&s[0], 1), a barrier, every thread reads it
  atomic_after_plain,        // thread 0 writes s[0], the others atomicAdd to it
  uninitialized_static,      // every thread reads s[63 - id] of a second array nobody wrote
  uninitialized_dynamic,     // the same in dynamic shared memory
  previous_block,            // block 0 writes the second array; block 1 only reads it
  atomics_then_syncwarp,     // lanes 0 and 1 atomicAdd(&s[0], 1), __syncwarp, lane 0 reads it
  read_after_atomics,        // threads 0 and 33 atomicAdd(&s[0], 1), thread 40 reads it
  dynamic_overrun,           // thread 0 reads dynamic[65] of the launch's 64 ints
  // Warp 0 reads s[1], a shuffle (warp 1 meanwhile: thread 33 writes one byte of s[1]), warp 0
  // reads s[1] twice more: a write of part of a word the detector knew as read-only must be seen.
  reread_around_a_byte_write,
  // Warp 0 reads s[0], __syncwarp, reads it again, then lane 0 writes it: the rereads race with
  // the write (the first reads do not).
  reread_after_syncwarp_then_write,
  // The detector keeps a cell per word until an access covers part of one (then per byte):
  bytes_of_one_word,           // threads 0..3 each write their byte of s[3]: race-free
  byte_write_then_word_read,   // thread 0 writes byte 3 of s[4], thread 1 reads s[4]
  word_write_then_byte_write,  // thread 0 writes s[6], thread 33 writes byte 1 of it
};
inline constexpr int kHazardBlock = 64;
// Runs the pattern (two blocks) under `s`; the detector's report, if it found one.
std::optional<emu::Hazard> hazard_of(Pattern p, const emu::Schedule& s);
// How many hazardous accesses the detector counted in the block it reported (0: none).
uint64_t hazard_count_of(Pattern p, const emu::Schedule& s);
// What the pattern's block 0 computes (s[id] after the pattern, per thread): the schedules agree
// on it for the race-free patterns.
std::vector<int> pattern_values(Pattern p, const emu::Schedule& s);

}  // namespace tandem::emu_test
