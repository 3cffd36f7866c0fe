#pragma once
// The order in which the emulator resumes a block's threads after every barrier, and the order
// of blocks in a grid (DESIGN section 3). A race-free kernel is bit-identical under all of them.
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::emu {

enum class Order { in_order, reversed, shuffled };

struct Schedule {
  Order order = Order::in_order;
  uint64_t seed = 0;  // for Order::shuffled
  std::string name() const;
  bool operator==(const Schedule& o) const {
    return order == o.order && (order != Order::shuffled || seed == o.seed);
  }
};

// How many host threads run the blocks of a launch from this host thread (1, the default: the
// launching thread alone), in [1, kMaxBlockWorkers]. For kernels whose blocks do not depend on
// one another, results, byte counts and hazard reports do not depend on it (a block's thread
// orders come from its own stream of the schedule; README "Blocks on host threads").
inline constexpr int kMaxBlockWorkers = 64;
void set_block_workers(int n);
// Whether the hazard detector watches the launches from this host thread (true, the default;
// nothing is watched while set_hazard_check is off for the process).
void set_hazard_watch(bool on);

// The schedules every kernel test runs under (at least three, DESIGN section 3).
std::vector<Schedule> test_schedules();
// Parses "in-order", "reversed" or "shuffled:SEED"; BadInput otherwise.
Schedule parse_schedule(const std::string& text);

}  // namespace tandem::emu
