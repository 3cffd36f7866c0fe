// The emulator's scheduler: one Boost.Context fiber per CUDA thread of a block; blocks run one
// after another. A fiber runs until it reaches a barrier (__syncthreads, or the warp barrier
// inside a shuffle) or ends, then switches straight to the next thread of the round; when every
// thread is parked, the barrier whose participants have all arrived is released and the parked
// threads resume in the schedule's order. A shuffle costs each lane one barrier (one switch):
// switches dominate the emulator's time (bench/, README "Emulator speed").
#include "optimized/emu/emu.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <boost/context/pooled_fixedsize_stack.hpp>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/error.hpp"

namespace tandem::emu {
namespace ctx = boost::context;

std::string Schedule::name() const {
  switch (order) {
    case Order::in_order:
      return "in-order";
    case Order::reversed:
      return "reversed";
    case Order::shuffled:
      return fmt::format("shuffled:{}", seed);
  }
  return "?";
}

std::vector<Schedule> test_schedules() {
  return {{Order::in_order, 0}, {Order::reversed, 0}, {Order::shuffled, 0x5eed}};
}

Schedule parse_schedule(const std::string& text) {
  if (text == "in-order") return {Order::in_order, 0};
  if (text == "reversed") return {Order::reversed, 0};
  if (text.rfind("shuffled:", 0) == 0) {
    // Digits only: stoull would take "-1" (wrapped to 2^64 - 1), "+5" and leading blanks.
    const std::string_view digits = std::string_view(text).substr(9);
    uint64_t seed = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seed);
    if (!digits.empty() && ec == std::errc() && end == digits.data() + digits.size())
      return {Order::shuffled, seed};
  }
  throw_bad_input("--schedule: expected in-order, reversed or shuffled:SEED, got '{}'", text);
}

namespace {

enum class Park { running, block_barrier, warp_barrier, done };

struct Thread {
  ctx::fiber fiber;  // resumes this thread; empty while it runs
  Park park = Park::running;
  unsigned exchange_half = 0;  // which half of Block::exchange this thread's next shuffle uses
  Builtins builtins{};
};

struct Block {
  const char* kernel;
  std::vector<Thread> threads;
  // Two words per thread: consecutive shuffles alternate halves, so a lane that has read its
  // word can start the next shuffle while slower lanes still read this one (one barrier each).
  std::vector<uint64_t> exchange;
  std::vector<uint64_t> dyn_smem;  // 8-byte aligned; CUDA guarantees 16, uint4 copies are memcpy
  // The round in progress: threads run one after another in `order` from `cursor`, each
  // switching straight to the next (one switch per thread), the last one back to `scheduler`.
  std::vector<unsigned> order;
  size_t cursor = 0;
  ctx::fiber scheduler;
};

// What the kernel's builtins and every switch read: plain pointers, so that a thread_local
// access needs no initialisation guard.
struct Current {
  Block* block = nullptr;
  Thread* thread = nullptr;
  LaunchCounts* counts = nullptr;
  Thread* switched_from = nullptr;  // whose continuation the resumed side keeps; null: scheduler
};
constinit thread_local Current g;

struct HostThread {
  LaunchLog log;
  Schedule schedule;
};
thread_local HostThread host;

// NOTE: the pool keeps stacks between blocks; 256 KiB leaves room for sanitizer frames.
ctx::pooled_fixedsize_stack& stack_pool() {
  thread_local ctx::pooled_fixedsize_stack pool(256 * 1024);
  return pool;
}

[[noreturn]] void kernel_fault(const std::string& what) {
  // A fault inside a fiber cannot unwind through the scheduler: report it like a device trap.
  std::fprintf(stderr, "emu: kernel %s: %s\n", g.block ? g.block->kernel : "?", what.c_str());
  std::abort();
}

Thread& current() {
  if (!g.thread) kernel_fault("CUDA builtin used outside a kernel");
  return *g.thread;
}

// The next thread of the round still running, or null when the round is over.
Thread* next_in_round() {
  Block& b = *g.block;
  while (b.cursor < b.order.size()) {
    Thread& t = b.threads[b.order[b.cursor++]];
    if (t.park == Park::running) return &t;
  }
  return nullptr;
}

// Whoever resumed us handed over its continuation: keep it where its owner will look.
void keep_continuation(ctx::fiber&& from) {
  (g.switched_from ? g.switched_from->fiber : g.block->scheduler) = std::move(from);
}

// Switches from `self` (a thread, or the scheduler when null) to the round's next thread, or
// to the scheduler when the round is over; returns when something switches back.
void switch_to_next(Thread* self) {
  Thread* next = next_in_round();
  ctx::fiber& target = next ? next->fiber : g.block->scheduler;
  g.thread = next;
  g.switched_from = self;
  keep_continuation(std::move(target).resume());
}

void park(Park p) {
  Thread& t = current();
  t.park = p;
  switch_to_next(&t);
}

class Orderer {
 public:
  explicit Orderer(const Schedule& s) : s_(s), rng_(s.seed) {}
  void fill(std::vector<unsigned>& order) {
    std::iota(order.begin(), order.end(), 0u);
    if (s_.order == Order::reversed) std::reverse(order.begin(), order.end());
    if (s_.order == Order::shuffled) std::shuffle(order.begin(), order.end(), rng_);
  }

 private:
  Schedule s_;
  std::mt19937_64 rng_;
};

// Releases every warp whose live lanes all wait at the warp barrier. Returns whether any was.
bool release_warps(Block& b) {
  bool released = false;
  const size_t n = b.threads.size();
  for (size_t w = 0; w < n; w += 32) {
    const size_t end = std::min(n, w + 32);
    bool all_parked = true, any_waiting = false;
    for (size_t i = w; i < end; ++i) {
      all_parked &= b.threads[i].park == Park::warp_barrier || b.threads[i].park == Park::done;
      any_waiting |= b.threads[i].park == Park::warp_barrier;
    }
    if (!all_parked || !any_waiting) continue;
    for (size_t i = w; i < end; ++i) {
      if (b.threads[i].park == Park::done)
        throw std::runtime_error(
            fmt::format("emu: kernel {}: a full-warp shuffle in warp {} while lane {} has exited",
                        b.kernel, w / 32, i % 32));
      b.threads[i].park = Park::running;
    }
    released = true;
  }
  return released;
}

bool release_block_barrier(Block& b) {
  const bool all_parked = std::all_of(b.threads.begin(), b.threads.end(), [](const Thread& t) {
    return t.park == Park::block_barrier || t.park == Park::done;
  });
  if (!all_parked) return false;
  bool any = false;
  for (Thread& t : b.threads)
    if (t.park == Park::block_barrier) t.park = Park::running, any = true;
  return any;
}

void run_block(Block& b, const std::function<void()>& body, Orderer& orderer) {
  for (Thread& t : b.threads) {
    t.fiber = ctx::fiber(std::allocator_arg, stack_pool(), [&t, &body](ctx::fiber&& from) {
      keep_continuation(std::move(from));
      body();
      t.park = Park::done;
      Thread* next = next_in_round();
      g.thread = next;
      g.switched_from = &t;  // it keeps an empty continuation: this one has ended
      return std::move(next ? next->fiber : g.block->scheduler);
    });
  }
  for (;;) {
    orderer.fill(b.order);
    b.cursor = 0;
    switch_to_next(nullptr);  // runs the round: every running thread up to its next barrier
    if (release_warps(b) || release_block_barrier(b)) continue;
    if (std::all_of(b.threads.begin(), b.threads.end(),
                    [](const Thread& t) { return t.park == Park::done; }))
      return;
    throw std::runtime_error(fmt::format(
        "emu: kernel {}: deadlock: threads wait at different barriers (divergent __syncthreads "
        "or shuffle)",
        b.kernel));
  }
}

}  // namespace

const Builtins& builtins() { return current().builtins; }

void syncthreads() { park(Park::block_barrier); }

uint64_t warp_exchange(uint64_t word, unsigned src, unsigned mask) {
  if (mask != 0xffffffffu) kernel_fault(fmt::format("shuffle mask {:#x}: only full warps", mask));
  Thread& t = current();
  Block& b = *g.block;
  const size_t tid = static_cast<size_t>(&t - b.threads.data());
  const size_t warp_base = tid & ~size_t{31};
  if (warp_base + 32 > b.threads.size())
    kernel_fault("shuffle in a partial warp (block size not a multiple of 32)");
  uint64_t* slots = b.exchange.data() + t.exchange_half * b.threads.size();
  t.exchange_half ^= 1u;
  slots[tid] = word;
  park(Park::warp_barrier);  // every lane has written
  return slots[warp_base + (src & 31u)];
}

void* dynamic_shared() {
  if (!g.block) kernel_fault("dynamic shared memory outside a kernel");
  return g.block->dyn_smem.data();
}

void count_bytes(Traffic c, bool write, uint64_t bytes) {
  if (!g.counts) kernel_fault("global memory access outside a kernel");
  (write ? g.counts->written : g.counts->read)[static_cast<int>(c)] += bytes;
}

void launch(const char* kernel, dim3 grid, dim3 block, size_t dynamic_smem,
            const std::function<void()>& body) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  if (threads == 0 || threads > 1024 || blocks == 0 ||
      dynamic_smem > (48u << 10))  // CUDA's default limit
    throw std::runtime_error(fmt::format(
        "emu: kernel {}: invalid launch: grid {}x{}x{}, block {}x{}x{}, {} B dynamic smem", kernel,
        grid.x, grid.y, grid.z, block.x, block.y, block.z, dynamic_smem));
  LaunchCounts counts{kernel};
  g.counts = &counts;
  Orderer orderer(host.schedule);
  std::vector<unsigned> block_order(blocks);
  orderer.fill(block_order);
  // One Block reused for every block of the grid: each starts with fresh threads and poisoned
  // (NaN) shared memory.
  Block b{kernel,
          std::vector<Thread>(threads),
          std::vector<uint64_t>(2 * threads),
          std::vector<uint64_t>((dynamic_smem + 7) / 8),
          std::vector<unsigned>(threads),
          0,
          {}};
  for (unsigned linear : block_order) {
    std::fill(b.dyn_smem.begin(), b.dyn_smem.end(), ~uint64_t{0});
    const uint3 bidx{linear % grid.x, linear / grid.x % grid.y, linear / (grid.x * grid.y)};
    for (unsigned i = 0; i < threads; ++i)
      b.threads[i] = {
          {},
          Park::running,
          0,
          {{i % block.x, i / block.x % block.y, i / (block.x * block.y)}, bidx, block, grid}};
    g.block = &b;
    try {
      run_block(b, body, orderer);
    } catch (...) {
      g.block = nullptr, g.counts = nullptr;
      throw;
    }
    g.block = nullptr;
  }
  g.counts = nullptr;
  host.log.push_back(std::move(counts));
}

LaunchLog take_launch_log() { return std::exchange(host.log, {}); }

void set_schedule(const Schedule& s) { host.schedule = s; }

}  // namespace tandem::emu
