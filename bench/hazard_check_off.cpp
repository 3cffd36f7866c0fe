// Linked into every benchmark: the emulator's shared-memory hazard check (on by default, for
// tests and verify) costs a callback per traced access, so benchmarks time the kernels without it
// unless TANDEM_HAZARD_CHECK=1.
#include <cstdlib>
#include <cstring>

#include "optimized/emu/hazard.hpp"

namespace {
const bool hazard_check_set = [] {
  const char* on = std::getenv("TANDEM_HAZARD_CHECK");
  tandem::emu::set_hazard_check(on && std::strcmp(on, "1") == 0);
  return true;
}();
}  // namespace
