#pragma once
// Which backend runs the optimized model: real CUDA on a GPU, or the kernel source under the
// emulator (DESIGN section 3).
#include <string>
#include <string_view>

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
};
// --block-threads: a multiple of 32 (whole warps) up to `max`; `why` says what bounds it.
void validate_block_threads(const RunOptions& opt, int max, std::string_view why);

}  // namespace tandem
