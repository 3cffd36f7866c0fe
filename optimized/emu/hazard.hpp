#pragma once
// Shared-memory hazard detection under the emulator: what compute-sanitizer's racecheck does on a
// GPU (DESIGN section 3). The host-side view; emu.hpp (kernel sources) includes it.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace tandem::emu {

// Kernel sources compiled for the emulator are built with clang's load/store tracing
// (-fsanitize-coverage=trace-loads,trace-stores); every traced access that lands in a block's
// shared memory is checked against the last writer and readers of each byte since the last
// barrier that orders the two threads (__syncthreads for the block, __syncwarp inside a warp).
enum class HazardKind {
  read_after_write,
  write_after_read,
  write_after_write,
  uninitialized_read,
  out_of_bounds,  // dynamic shared memory past the launch's size
};
std::string_view hazard_kind_name(HazardKind k);

struct Hazard {
  HazardKind kind;
  std::string kernel;
  std::array<unsigned, 3> block;  // blockIdx x, y, z
  bool dynamic;          // dynamic (extern) shared memory, or the kernels' static __shared__
  size_t offset;         // byte offset in that space
  size_t dynamic_bytes;  // the launch's dynamic shared memory
  unsigned thread;       // linear id of the thread whose access found the hazard
  unsigned other;        // the earlier accessor's linear id; kNoOther for uninitialized reads
  std::string location;  // where the access is in the binary ("file+0xoffset", for addr2line)
  static constexpr unsigned kNoOther = ~0u, kSeveral = ~0u - 1;  // kSeveral: atomics by several
  std::string describe() const;
};

// A launch whose block had a hazard ends with this after that block: a defect of the kernel, so a
// verification failure (KernelFault), never bad input.
class HazardError : public KernelFault {
 public:
  HazardError(const Hazard& first, uint64_t count);
  const Hazard& first() const { return first_; }
  uint64_t count() const { return count_; }  // hazards found in that block, the first included

 private:
  Hazard first_;
  uint64_t count_;
};

// Whether this build traces kernel accesses (clang); without it set_hazard_check changes nothing.
bool hazard_check_built();
// On by default; process-wide. Benchmarks turn it off (its cost is bench/'s emu rows' business).
void set_hazard_check(bool on);
bool hazard_check();

}  // namespace tandem::emu
