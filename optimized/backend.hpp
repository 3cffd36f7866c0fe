#pragma once
// Which backend runs the optimized model: real CUDA on a GPU, or the kernel source under the
// emulator (DESIGN section 3).
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "optimized/emu/schedule.hpp"

namespace tandem {

enum class Backend { emu, cuda };
const char* backend_name(Backend b);

struct BackendStatus {
  bool available;
  std::string detail;  // the device, or why it is not available
};
// Whether this build has CUDA and cudaGetDeviceCount finds a device.
BackendStatus cuda_status();
// cuda when available, else emu.
Backend best_backend();
struct RunOptions {
  Backend backend = Backend::emu;
  emu::Schedule schedule;   // emu only
  int block_threads = 128;  // threads per block, a multiple of 32
  // emu only: host threads running a launch's blocks, in [1, emu::kMaxBlockWorkers] (results,
  // byte counts and hazard reports of kernels with independent blocks do not depend on it).
  int block_workers = 1;
  // emu verify rows: rerun under every test schedule (off: the row's own run under `schedule`
  // only; the specificity campaign draws one schedule per config, the hazard detector watching).
  bool rerun_schedules = true;
  // emu: the shared-memory hazard detector watches this run's launches (when it is on for the
  // process: emu::set_hazard_check). check_schedules' reruns turn it off: a hazard is found from
  // the accesses between two barriers whatever order a schedule runs them in, and the row's own
  // run was watched (the detector is a quarter of a release-width row's emulated time).
  bool watch_hazards = true;
  // Blocks of a grid-stride launch at most (kv_quantize, rope_queries: a warp a row, each warp
  // striding on by the grid's warps), in [1, 2^31 - 1]; the tests lower it so that the stride
  // runs more than once at small sizes, as it does past 65535 x warps rows.
  int64_t max_grid_blocks = 65535;
};

// The grid of a grid-stride launch over `rows` at `rows_per_block` a block.
inline unsigned grid_stride_blocks(int64_t rows, int rows_per_block, const RunOptions& opt) {
  if (opt.max_grid_blocks < 1 || opt.max_grid_blocks > INT32_MAX)
    throw BadInput("RunOptions::max_grid_blocks " + std::to_string(opt.max_grid_blocks) +
                   " is outside [1, 2^31 - 1]");
  return unsigned(std::min((rows + rows_per_block - 1) / rows_per_block, opt.max_grid_blocks));
}
// --block-threads: a multiple of 32 (whole warps) up to `max`; `why` says what bounds it.
void validate_block_threads(const RunOptions& opt, int max, std::string_view why);

}  // namespace tandem
