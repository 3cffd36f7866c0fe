// The emulator's scheduler: one Boost.Context fiber per CUDA thread of a block; a host thread
// runs one block at a time (a launch's blocks on RunOptions::block_workers of them). A fiber runs
// until it reaches a barrier (__syncthreads, or the warp barrier inside a shuffle) or ends, then
// switches straight to the next thread of the round; when every thread is parked, the barrier whose
// participants have all arrived is released and the parked threads resume in the schedule's order.
// A shuffle costs each lane one barrier (one switch): switches dominate the emulator's time
// (bench/, README "Emulator speed").
#include "optimized/emu/emu.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <boost/context/fiber.hpp>
#include <boost/context/pooled_fixedsize_stack.hpp>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/device_limits.hpp"
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
  bool fence = false;          // parked at a __syncwarp (orders shared memory), not a shuffle
  Builtins builtins{};
};

// ---- the hazard detector's shadow state: the state of every byte of shared memory, a Cell per
// 4-byte word while every access to it has covered the whole word (its four bytes then have one
// history, so one cell holds it), a Cell per byte once an access covered part of it. A record is
// live only for the block that made it (its `block` generation) and the block-barrier interval
// it was made in (`epoch`); inside a warp a later __syncwarp (a newer warp epoch) also orders it.
constexpr uint16_t kNone = 0xffff, kSeveral = 0xfffe;  // thread ids are < 1024
constexpr uint16_t kSeveralWarps = 0xffff;

struct Record {
  uint32_t block = 0;  // 0: never, in any block
  uint32_t epoch = 0, warp_epoch = 0;
};

struct Cell {
  Record write;
  uint16_t writer = kNone;   // kSeveral: atomics by several threads, of warp `writer_warp`
  uint16_t writer_warp = 0;  // kSeveralWarps: of several warps
  bool atomic = false;       // the live write is an atomic (others' atomics do not race with it)
  Record read;
  // Readers since the interval began: `reader`, another one `other_reader` (from another warp
  // when read_warp is kSeveralWarps), the warp they read from.
  uint16_t reader = kNone, other_reader = kNone, read_warp = 0;
};

// Who may read a cell again without a hazard or a change to it (read_cell returns at once and
// writes nothing): staged in an earlier interval of this block and already read in this one by
// several warps (block), by two lanes of the reader's warp at its warp epoch (warp), or by the
// reader itself (thread).
enum class Quiet : uint8_t { none, thread, warp, block };

// A 4-byte word's summary of its four cells, made by a read of the whole word: the least quiet of
// them for that reader. It holds until a write to the word (which clears it), the next block
// barrier or the next block: reads never make a quiet cell unquiet (another warp's read turns
// `warp` into `block`; a warp's newer warp epoch no longer matches). A read of whole words whose
// summaries cover the reader checks nothing else: the emulator's hot path, a value staged in
// shared memory that lanes read again and again (a weight row's dot with a staged vector).
struct QuietWord {
  uint32_t block = 0, epoch = 0, warp_epoch = 0;
  uint16_t reader = 0;
  Quiet level = Quiet::none;
};

// One shared-memory region's shadow: per 4-byte word its cell, or its bytes' cells once a partial
// access split it in this block, and its summary.
struct Shadow {
  std::vector<Cell> whole;         // [words]: the word's four bytes, while not split
  std::vector<uint32_t> split_in;  // [words]: the block generation that split it (0: none)
  std::vector<Cell> bytes;         // [4 * words]: a split word's bytes
  std::vector<QuietWord> words;
  void reserve(size_t bytes_needed) {
    const size_t n = (bytes_needed + 3) / 4;
    if (whole.size() < n) whole.resize(n), split_in.resize(n), bytes.resize(4 * n), words.resize(n);
  }
  void forget() {
    std::fill(whole.begin(), whole.end(), Cell{});
    std::fill(split_in.begin(), split_in.end(), 0u);
    std::fill(words.begin(), words.end(), QuietWord{});
  }
  bool is_split(size_t w, uint32_t block) const { return split_in[w] == block; }
  // The word's bytes take its whole cell's state (every record of an older block is dead, so a
  // word split in an earlier block starts whole again).
  void split(size_t w, uint32_t block) {
    if (is_split(w, block)) return;
    std::fill_n(bytes.begin() + ptrdiff_t(4 * w), 4, whole[w]);
    split_in[w] = block;
  }
};

struct Detector {
  Shadow static_shadow, dynamic_shadow;
  uint32_t block = 0;  // this block's generation
  uint32_t epoch = 0;  // block barriers released in this block
  std::vector<uint32_t> warp_epoch;
  std::optional<Hazard> first;
  uint64_t count = 0;
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
  Detector* detector = nullptr;  // null: hazard check off
  size_t dyn_bytes = 0;          // the launch's dynamic shared memory (dyn_smem rounds it up)
  // [2, warps]: per exchange half, the warp's butterfly sum of its deposits once a lane has made
  // it (every lane's result is the same: the others take it instead of making it again).
  std::vector<std::optional<float>> warp_sums;
};
// Dynamic shared memory is followed by a red zone, so that the detector sees an access past the
// launch's size as one (an out-of-bounds report) rather than as unrelated host memory.
constexpr size_t kRedZoneWords = 32;

// What the kernel's builtins and every switch read: plain pointers, so that a thread_local
// access needs no initialisation guard.
struct Current {
  Block* block = nullptr;
  Thread* thread = nullptr;
  LaunchCounts* counts = nullptr;
  Thread* switched_from = nullptr;  // whose continuation the resumed side keeps; null: scheduler
  // While this host thread runs blocks: the Block whose shared memory the detector watches (null:
  // the check is off), this thread's instance of the kernels' static __shared__ and the Block's
  // dynamic shared memory with its red zone (what every traced access compares its address with).
  Block* checked = nullptr;
  uintptr_t static_base = 0, dynamic_base = 0;
  size_t static_bytes = 0, dynamic_bytes = 0;
};
constinit thread_local Current g;

struct HostThread {
  LaunchLog log;
  Schedule schedule;
  int block_workers = 1;
  bool watch_hazards = true;
  Detector detector;
};
thread_local HostThread host;

std::atomic<bool> g_hazard_check{true};

// Every kernel's static __shared__: the thread-local section emu.hpp puts them in (weak: a program
// with no kernel that declares one has no such section). Its initial image lies in its module's
// TLS template; a host thread's instance lies at the same offset of the thread's TLS block
// (glibc's dlpi_tls_data).
extern "C" char __start_tandem_shared[] __attribute__((weak));
extern "C" char __stop_tandem_shared[] __attribute__((weak));

struct StaticShared {
  char* base = nullptr;
  size_t bytes = 0;
};

StaticShared find_static_shared() {
  if (!__start_tandem_shared) return {};
  StaticShared found{nullptr, size_t(__stop_tandem_shared - __start_tandem_shared)};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const char* image = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
          if (ph.p_type != PT_TLS || !info->dlpi_tls_data || __start_tandem_shared < image ||
              __start_tandem_shared >= image + ph.p_memsz)
            continue;
          static_cast<StaticShared*>(out)->base =
              static_cast<char*>(info->dlpi_tls_data) + (__start_tandem_shared - image);
          return 1;
        }
        return 0;
      },
      &found);
  if (!found.base)
    throw std::runtime_error(
        "emu: static __shared__: section tandem_shared is in no module's TLS segment");
  return found;
}

// This host thread's instance of every kernel's static __shared__.
const StaticShared& static_shared() {
  thread_local const StaticShared s = find_static_shared();
  return s;
}

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

// ---- hazard detection

enum class Access { read, write, atomic };

struct Accessor {
  unsigned tid, warp;
  uint32_t warp_epoch;
};

bool live(const Record& r, const Detector& d) { return r.block == d.block && r.epoch == d.epoch; }

// Whether the live write happens before `me`'s access without a block barrier: the same thread,
// or the same warp (every writer of it, for atomics by several) across a __syncwarp.
bool write_ordered(const Cell& c, const Accessor& me) {
  return c.writer == me.tid || (c.writer_warp == me.warp && c.write.warp_epoch < me.warp_epoch);
}

// The thread a report names for the cell's writer.
unsigned reported_writer(const Cell& c) {
  return c.writer == kSeveral ? Hazard::kSeveral : c.writer;
}

struct Found {
  HazardKind kind;
  unsigned other;
};

std::optional<Found> read_cell(Cell& c, const Accessor& me, const Detector& d) {
  // The common case, a value staged in an earlier interval that several warps read: no hazard,
  // nothing to record.
  if (c.write.block == d.block && c.write.epoch != d.epoch && c.read_warp == kSeveralWarps &&
      live(c.read, d))
    return std::nullopt;
  std::optional<Found> found;
  if (c.write.block != d.block)
    found = Found{HazardKind::uninitialized_read, Hazard::kNoOther};
  else if (c.write.epoch == d.epoch && !write_ordered(c, me))
    found = Found{HazardKind::read_after_write, reported_writer(c)};
  const bool older_in_warp = c.read_warp == me.warp && c.read.warp_epoch < me.warp_epoch;
  if (!live(c.read, d) || older_in_warp) {
    c.read = {d.block, d.epoch, me.warp_epoch};
    c.reader = uint16_t(me.tid), c.other_reader = kNone, c.read_warp = uint16_t(me.warp);
  } else if (c.read_warp != kSeveralWarps && c.read_warp != me.warp) {
    c.read_warp = kSeveralWarps, c.other_reader = uint16_t(me.tid);  // a reader of another warp
  } else if (c.read_warp == me.warp && c.reader != me.tid && c.other_reader == kNone) {
    c.other_reader = uint16_t(me.tid);
  }
  return found;
}

// A reader of the live interval that `me` is not ordered after, if any.
uint16_t unordered_reader(const Cell& c, const Accessor& me, const Detector& d) {
  if (!live(c.read, d)) return kNone;
  if (c.read_warp == kSeveralWarps) return c.reader / 32 != me.warp ? c.reader : c.other_reader;
  if (c.read_warp != me.warp) return c.reader;
  if (c.read.warp_epoch < me.warp_epoch) return kNone;
  return c.reader != me.tid ? c.reader : c.other_reader;
}

std::optional<Found> write_cell(Cell& c, bool atomic, const Accessor& me, const Detector& d) {
  std::optional<Found> found;
  const bool unordered_write = live(c.write, d) && !write_ordered(c, me);
  if (atomic && c.write.block != d.block)  // an atomic reads the value it updates
    found = Found{HazardKind::uninitialized_read, Hazard::kNoOther};
  else if (unordered_write && !(atomic && c.atomic))
    found = Found{HazardKind::write_after_write, reported_writer(c)};
  else if (const uint16_t reader = unordered_reader(c, me, d); reader != kNone)
    found = Found{HazardKind::write_after_read, reader};
  if (atomic && c.atomic && unordered_write) {  // one more of several atomics
    c.writer = kSeveral;
    if (c.writer_warp != me.warp) c.writer_warp = kSeveralWarps;
  } else {
    c.writer = uint16_t(me.tid), c.writer_warp = uint16_t(me.warp);
  }
  c.atomic = atomic;
  c.write = {d.block, d.epoch, me.warp_epoch};
  return found;
}

std::string locate(const void* pc) {
  Dl_info info;
  if (pc && dladdr(pc, &info) && info.dli_fname)
    return fmt::format(
        "{}+{:#x}", info.dli_fname,
        reinterpret_cast<uintptr_t>(pc) - reinterpret_cast<uintptr_t>(info.dli_fbase));
  return "?";
}

// Counts a hazard; keeps the block's first (out of line: the check below runs for every shared
// access, a report almost never).
__attribute__((noinline)) void report(Block& b, const Found& found, bool dynamic, size_t offset,
                                      unsigned tid, const void* pc) {
  Detector& d = *b.detector;
  ++d.count;
  const uint3 block = b.threads[tid].builtins.block_idx;
  if (!d.first)
    d.first = Hazard{found.kind, b.kernel,    {block.x, block.y, block.z},
                     dynamic,    offset,      b.dyn_bytes,
                     tid,        found.other, locate(pc)};
}

// Whom the cell's readers cover (after `me` read it).
Quiet read_quietness(const Cell& c, const Accessor& me, const Detector& d) {
  if (!live(c.read, d)) return Quiet::none;
  if (c.read_warp == kSeveralWarps) return Quiet::block;
  if (c.read_warp != me.warp || c.read.warp_epoch != me.warp_epoch) return Quiet::none;
  if (c.other_reader != kNone) return Quiet::warp;
  return c.reader == me.tid ? Quiet::thread : Quiet::none;
}

// Whom a read of the cell finds no hazard for and changes nothing: its readers, within whom its
// write is ordered before (every reader for a write of an earlier interval; a write of this one
// for its warp after a __syncwarp, or for its own thread).
Quiet quietness(const Cell& c, const Accessor& me, const Detector& d) {
  if (c.write.block != d.block) return Quiet::none;
  const Quiet readers = read_quietness(c, me, d);
  if (c.write.epoch != d.epoch) return readers;
  if (c.writer_warp == me.warp && c.write.warp_epoch < me.warp_epoch)
    return std::min(readers, Quiet::warp);
  return c.writer == me.tid ? std::min(readers, Quiet::thread) : Quiet::none;
}

bool covers(const QuietWord& w, const Accessor& me, const Detector& d) {
  if (w.block != d.block || w.epoch != d.epoch) return false;
  switch (w.level) {
    case Quiet::block:
      return true;
    case Quiet::warp:
      return w.reader / 32 == me.warp && w.warp_epoch == me.warp_epoch;
    case Quiet::thread:
      return w.reader == me.tid && w.warp_epoch == me.warp_epoch;
    case Quiet::none:
      return false;
  }
  return false;
}

Accessor accessor(const Block& b) {
  const auto tid = static_cast<unsigned>(g.thread - b.threads.data());
  return {tid, tid / 32, b.detector->warp_epoch[tid / 32]};
}

// Checks an access of `size` bytes at `offset` of the block's static or dynamic shared memory,
// a word's cell or its bytes' cells at a time (check_shared's slow path).
__attribute__((noinline)) void check_cells(Block& b, bool dynamic, size_t offset, size_t limit,
                                           unsigned size, Access a, const void* pc) {
  Detector& d = *b.detector;
  const Accessor me = accessor(b);
  if (dynamic && offset + size > b.dyn_bytes)  // past the launch's size (or its 8-byte padding)
    return report(b, {HazardKind::out_of_bounds, Hazard::kNoOther}, dynamic, offset, me.tid, pc);
  Shadow& shadow = dynamic ? d.dynamic_shadow : d.static_shadow;
  const size_t end = std::min(limit, offset + size);
  std::optional<Found> found;
  auto check = [&](Cell& c) {
    auto f = a == Access::read ? read_cell(c, me, d) : write_cell(c, a == Access::atomic, me, d);
    if (f && !found) found = f;
  };
  for (size_t w = offset / 4; 4 * w < end; ++w) {
    const size_t first = std::max(offset, 4 * w), last = std::min(end, 4 * w + 4);
    if (last - first == 4 && !shadow.is_split(w, d.block)) {
      check(shadow.whole[w]);
    } else {
      shadow.split(w, d.block);
      for (size_t i = first; i < last; ++i) check(shadow.bytes[i]);
    }
    if (a != Access::read) {  // every word the write touches, whole or in part
      shadow.words[w].level = Quiet::none;
    } else if (last - first == 4) {  // a word it reads whole
      Quiet level = Quiet::block;
      if (!shadow.is_split(w, d.block))
        level = quietness(shadow.whole[w], me, d);
      else
        for (size_t i = 4 * w; i < 4 * w + 4; ++i)
          level = std::min(level, quietness(shadow.bytes[i], me, d));
      shadow.words[w] = {d.block, d.epoch, me.warp_epoch, uint16_t(me.tid), level};
    }
  }
  if (found) report(b, *found, dynamic, offset, me.tid, pc);
}

// Checks an access: a read of whole words that their summaries cover returns at once.
inline void check_shared(Block& b, bool dynamic, size_t offset, size_t limit, unsigned size,
                         Access a, const void* pc) {
  const Detector& d = *b.detector;
  const size_t end = offset + size;
  if (a == Access::read && offset % 4 == 0 && size % 4 == 0 && end <= limit &&
      (!dynamic || end <= b.dyn_bytes)) {
    const Accessor me = accessor(b);
    const QuietWord* words = (dynamic ? d.dynamic_shadow : d.static_shadow).words.data();
    if (std::all_of(words + offset / 4, words + end / 4,
                    [&](const QuietWord& w) { return covers(w, me, d); }))
      return;
  }
  check_cells(b, dynamic, offset, limit, size, a, pc);
}

// Every traced load and store of the kernel sources comes here: most are global memory or the
// fiber's stack and return at once (kept small: it runs for every access).
inline void trace(const void* p, unsigned size, Access a, const void* pc) {
  Block* b = g.checked;
  if (!b || !g.thread) return;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  if (addr - g.static_base < g.static_bytes)
    check_shared(*b, false, addr - g.static_base, g.static_bytes, size, a, pc);
  else if (addr - g.dynamic_base < g.dynamic_bytes)
    check_shared(*b, true, addr - g.dynamic_base, g.dynamic_bytes, size, a, pc);
}

template <class T>
T atomic_add_traced(T* p, T v, const void* pc) {
  trace(p, sizeof(T), Access::atomic, pc);
  // Atomic for real: blocks on other host threads may update the same global word.
  return std::atomic_ref<T>(*p).fetch_add(v);
}

// The schedule's orders: stream 0 orders a grid's blocks, stream 1 + b block b's threads.
class Orderer {
 public:
  Orderer(const Schedule& s, uint64_t stream)
      : s_(s), rng_(s.seed ^ (0x9e3779b97f4a7c15ull * stream)) {}
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
    bool fence = false;
    for (size_t i = w; i < end; ++i) {
      if (b.threads[i].park == Park::done)
        throw std::runtime_error(
            fmt::format("emu: kernel {}: a full-warp shuffle in warp {} while lane {} has exited",
                        b.kernel, w / 32, i % 32));
      b.threads[i].park = Park::running;
      fence |= std::exchange(b.threads[i].fence, false);
    }
    if (fence && b.detector) ++b.detector->warp_epoch[w / 32];
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
  if (any && b.detector) ++b.detector->epoch;
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

void syncwarp(unsigned mask) {
  current().fence = true;
  (void)warp_exchange(0, 0, mask);
}

namespace {

// A meeting of a warp's lanes: their 32 deposits, and the warp's sum of them once a lane has made
// it (both valid until this lane's exchange after next: consecutive exchanges alternate halves).
struct Meet {
  const uint64_t* lanes;
  std::optional<float>* sum;
};

// Every lane of the calling thread's warp deposits `word`; returns the meeting once all have.
Meet warp_meet(uint64_t word, unsigned mask) {
  if (mask != 0xffffffffu) kernel_fault(fmt::format("shuffle mask {:#x}: only full warps", mask));
  Thread& t = current();
  Block& b = *g.block;
  const size_t tid = static_cast<size_t>(&t - b.threads.data());
  const size_t warp_base = tid & ~size_t{31};
  if (warp_base + 32 > b.threads.size())
    kernel_fault("shuffle in a partial warp (block size not a multiple of 32)");
  const size_t half = t.exchange_half;
  uint64_t* slots = b.exchange.data() + half * b.threads.size();
  t.exchange_half ^= 1u;
  slots[tid] = word;
  // A new meeting on this half: every lane has read the one before it here (it met since).
  std::optional<float>& sum = b.warp_sums[half * (b.threads.size() / 32) + tid / 32];
  sum.reset();
  park(Park::warp_barrier);  // every lane has written
  return {slots + warp_base, &sum};
}

}  // namespace

uint64_t warp_exchange(uint64_t word, unsigned src, unsigned mask) {
  return warp_meet(word, mask).lanes[src & 31u];
}

namespace {

// The warp meets with v deposited by each lane.
Meet meet_float(float v) {
  uint64_t word = 0;
  std::memcpy(&word, &v, sizeof v);
  return warp_meet(word, 0xffffffffu);
}

// The meeting's 32 deposits as floats.
void deposits(const Meet& m, float (&value)[32]) {
  for (int i = 0; i < 32; ++i) std::memcpy(&value[i], &m.lanes[i], sizeof(float));
}

}  // namespace

float warp_butterfly_sum(float v) {
  const Meet m = meet_float(v);
  if (!*m.sum) {  // the first lane to resume makes the warp's sum
    float value[32];
    deposits(m, value);
    // Lane 0's path (lanes i < o at offset o): every lane's sum, as float addition commutes.
    for (unsigned o = 16; o > 0; o /= 2)
      for (unsigned i = 0; i < o; ++i) value[i] = value[i] + value[i + o];
    *m.sum = value[0];
  }
  return **m.sum;
}

float warp_butterfly_max(float v) {
  float value[32];
  deposits(meet_float(v), value);
  // The calling lane's own path: fmaxf of +0 and -0 need not commute, so lanes may differ. At
  // offset o its value depends on the o lanes that agree with it on the bits from o's up (updated
  // in place: their partners differ in bit o, so are not rewritten at this offset).
  const unsigned lane = static_cast<unsigned>(&current() - g.block->threads.data()) % 32;
  for (unsigned o = 16; o > 0; o /= 2)
    for (unsigned j = 0; j < o; ++j) {
      const unsigned x = (lane & ~(o - 1)) | j;
      value[x] = fmaxf(value[x], value[x ^ o]);
    }
  return value[lane];
}

int atomic_add(int* p, int v) { return atomic_add_traced(p, v, __builtin_return_address(0)); }
unsigned atomic_add(unsigned* p, unsigned v) {
  return atomic_add_traced(p, v, __builtin_return_address(0));
}
float atomic_add(float* p, float v) { return atomic_add_traced(p, v, __builtin_return_address(0)); }

void* dynamic_shared() {
  if (!g.block) kernel_fault("dynamic shared memory outside a kernel");
  return g.block->dyn_smem.data();
}

void count_bytes(Traffic c, bool write, uint64_t bytes) {
  if (!g.counts) kernel_fault("global memory access outside a kernel");
  (write ? g.counts->written : g.counts->read)[static_cast<int>(c)] += bytes;
}

namespace {

// The kernels' dynamic shared memory attribute (cudaFuncSetAttribute): per host thread (a GPU
// has one per process), so that verify's rows on several threads, each setting a kernel's
// attribute for its own size just before launching it, cannot undo one another's.
thread_local std::unordered_map<const void*, size_t> g_max_dynamic_shared;

size_t max_dynamic_shared(const void* fn) {
  const auto it = g_max_dynamic_shared.find(fn);
  return it == g_max_dynamic_shared.end() ? kDefaultDynamicShared
                                          : std::max(it->second, kDefaultDynamicShared);
}

void prepare(Detector& d, size_t static_bytes, size_t dynamic_bytes, size_t threads) {
  d.static_shadow.reserve(static_bytes);
  d.dynamic_shadow.reserve(dynamic_bytes);
  d.warp_epoch.assign((threads + 31) / 32, 0);
}

void begin_block(Detector& d) {
  if (++d.block == 0) {  // generations wrapped: forget every record
    d.static_shadow.forget();
    d.dynamic_shadow.forget();
    d.block = 1;
  }
  d.epoch = 0;
  std::fill(d.warp_epoch.begin(), d.warp_epoch.end(), 0);
  d.first.reset();
  d.count = 0;
}

// Host threads that run blocks beside the launching one (set_block_workers), one set per
// launching thread: made at its first launch that wants them and kept while it lives, so that
// their fiber stacks and the detector's shadow memory are reused from launch to launch.
class BlockWorkers {
 public:
  BlockWorkers() = default;
  BlockWorkers(const BlockWorkers&) = delete;
  BlockWorkers& operator=(const BlockWorkers&) = delete;
  ~BlockWorkers() {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
  }  // the jthreads join

  // Runs task(w) for every w in [0, n): 0 on the calling thread, the others on workers; returns
  // once all have. `task` must not throw.
  void run(int n, const std::function<void(int)>& task) {
    while (int(threads_.size()) < n - 1) {
      const int w = int(threads_.size()) + 1;
      threads_.emplace_back([this, w] { serve(w); });
    }
    {
      const std::lock_guard lock(mutex_);
      task_ = &task, wanted_ = n, pending_ = n - 1, ++generation_;
    }
    wake_.notify_all();
    task(0);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
  }

 private:
  void serve(int w) {
    uint64_t seen = 0;
    for (;;) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (w >= wanted_) continue;
      const std::function<void(int)>& task = *task_;
      lock.unlock();
      task(w);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* task_ = nullptr;
  int wanted_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::jthread> threads_;  // last: joined before the members above go
};

// What every host thread running a launch's blocks shares.
struct Grid {
  Grid(const char* k, dim3 g, dim3 b, size_t smem, const Schedule& s, bool w,
       const std::function<void()>& f)
      : kernel(k),
        grid(g),
        block(b),
        dynamic_smem(smem),
        schedule(s),
        watched(w),
        body(f),
        order(size_t(g.x) * g.y * g.z) {
    Orderer(s, 0).fill(order);
  }
  const char* kernel;
  dim3 grid, block;
  size_t dynamic_smem;
  Schedule schedule;
  bool watched;  // by the hazard detector (the launching thread's setting, for every worker)
  const std::function<void()>& body;
  std::vector<unsigned> order;  // linear block indices, in the schedule's order
  std::atomic<size_t> next{0};  // the position in `order` of the next block to run
  // The earliest position whose block failed, and its exception: positions are handed out in
  // order, so every block before it has run, and the report does not depend on the workers.
  std::mutex failure_mutex;
  std::atomic<size_t> failed_at{SIZE_MAX};
  std::exception_ptr failure;
  void fail(size_t position, std::exception_ptr e) {
    const std::lock_guard lock(failure_mutex);
    if (position < failed_at) failed_at = position, failure = std::move(e);
  }
};

// Runs blocks of the grid on this host thread, taking the next position as it comes free, with
// its own Block, static __shared__ instance, detector and byte counts.
void take_blocks(Grid& grid, LaunchCounts& counts) {
  const uint64_t threads = uint64_t{grid.block.x} * grid.block.y * grid.block.z;
  // One Block reused for every block this thread runs: each starts with fresh threads and
  // poisoned (NaN) shared memory.
  Block b{grid.kernel,
          std::vector<Thread>(threads),
          std::vector<uint64_t>(2 * threads),
          std::vector<uint64_t>((grid.dynamic_smem + 7) / 8 + kRedZoneWords),
          std::vector<unsigned>(threads),
          0,
          {},
          grid.watched ? &host.detector : nullptr,
          grid.dynamic_smem,
          std::vector<std::optional<float>>(2 * ((threads + 31) / 32))};
  const StaticShared& statics = static_shared();
  if (b.detector) prepare(*b.detector, statics.bytes, 8 * b.dyn_smem.size(), threads);
  // Static shared memory starts poisoned (NaN) in every launch; what one block leaves for the next
  // is the detector's to report (an uninitialized read), the memset being too dear per block.
  if (statics.bytes) std::memset(statics.base, 0xff, statics.bytes);
  g.counts = &counts;
  g.checked = b.detector ? &b : nullptr;
  g.static_base = reinterpret_cast<uintptr_t>(statics.base), g.static_bytes = statics.bytes;
  g.dynamic_base = reinterpret_cast<uintptr_t>(b.dyn_smem.data());
  g.dynamic_bytes = 8 * b.dyn_smem.size();
  const dim3 gd = grid.grid, bd = grid.block;
  for (size_t at = grid.next++; at < grid.order.size() && at < grid.failed_at; at = grid.next++) {
    const unsigned linear = grid.order[at];
    std::fill(b.dyn_smem.begin(), b.dyn_smem.end(), ~uint64_t{0});
    if (b.detector) begin_block(*b.detector);
    const uint3 bidx{linear % gd.x, linear / gd.x % gd.y, linear / (gd.x * gd.y)};
    for (unsigned i = 0; i < threads; ++i)
      b.threads[i] = {{},
                      Park::running,
                      0,
                      false,
                      {{i % bd.x, i / bd.x % bd.y, i / (bd.x * bd.y)}, bidx, bd, gd}};
    g.block = &b;
    // The block's thread orders come from its own stream of the schedule: the same whichever
    // host thread runs it, and after whichever blocks.
    Orderer orderer(grid.schedule, uint64_t{linear} + 1);
    try {
      run_block(b, grid.body, orderer);
      if (b.detector && b.detector->first) throw HazardError(*b.detector->first, b.detector->count);
    } catch (...) {
      grid.fail(at, std::current_exception());
      break;
    }
  }
}

// take_blocks on this host thread; never throws (a worker thread cannot): what goes wrong before
// the first block (its memory, the static __shared__ lookup) is the grid's first failure.
void run_blocks(Grid& grid, LaunchCounts& counts) noexcept {
  try {
    take_blocks(grid, counts);
  } catch (...) {
    grid.fail(0, std::current_exception());
  }
  g = Current{};
}

}  // namespace

void set_max_dynamic_shared(const void* fn, size_t bytes) {
  if (bytes > kMaxDynamicShared)
    throw std::runtime_error(fmt::format(
        "emu: cudaFuncSetAttribute: {} B of dynamic shared memory, past the {} B a block can have",
        bytes, kMaxDynamicShared));
  g_max_dynamic_shared[fn] = bytes;
}

// Launches from several host threads run at once, like streams of one device: each host thread
// has its own static __shared__ instance, detector, schedule and launch log.
void launch(const char* kernel, const void* fn, dim3 grid, dim3 block, size_t dynamic_smem,
            const std::function<void()>& body) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  const size_t smem_limit = max_dynamic_shared(fn);
  if (threads == 0 || threads > 1024 || blocks == 0 || dynamic_smem > smem_limit)
    throw std::runtime_error(fmt::format(
        "emu: kernel {}: invalid launch: grid {}x{}x{}, block {}x{}x{}, {} B dynamic smem (at "
        "most {} B for this kernel)",
        kernel, grid.x, grid.y, grid.z, block.x, block.y, block.z, dynamic_smem, smem_limit));
  Grid shared(kernel, grid, block, dynamic_smem, host.schedule,
              host.watch_hazards && hazard_check(), body);
  const int workers = int(std::min<uint64_t>(uint64_t(host.block_workers), blocks));
  std::vector<LaunchCounts> counts(size_t(workers), LaunchCounts{kernel});
  if (workers == 1) {
    run_blocks(shared, counts[0]);
  } else {
    thread_local BlockWorkers pool;
    pool.run(workers, [&](int w) { run_blocks(shared, counts[size_t(w)]); });
  }
  if (shared.failure) std::rethrow_exception(shared.failure);
  for (size_t w = 1; w < counts.size(); ++w)
    for (int c = 0; c < kTrafficClasses; ++c) {
      counts[0].read[size_t(c)] += counts[w].read[size_t(c)];
      counts[0].written[size_t(c)] += counts[w].written[size_t(c)];
    }
  host.log.push_back(std::move(counts[0]));
}

bool hazard_check_built() {
#if defined(TANDEM_EMU_HAZARDS)
  return true;
#else
  return false;
#endif
}
void set_hazard_check(bool on) { g_hazard_check = on; }
bool hazard_check() { return g_hazard_check && hazard_check_built(); }

std::string_view hazard_kind_name(HazardKind k) {
  switch (k) {
    case HazardKind::read_after_write:
      return "read-after-write";
    case HazardKind::write_after_read:
      return "write-after-read";
    case HazardKind::write_after_write:
      return "write-after-write";
    case HazardKind::uninitialized_read:
      return "uninitialized read";
    case HazardKind::out_of_bounds:
      return "out-of-bounds access";
  }
  return "?";
}

std::string Hazard::describe() const {
  const std::string where =
      fmt::format("{} in block ({},{},{})", hazard_kind_name(kind), block[0], block[1], block[2]);
  const char* space = dynamic ? "dynamic shared" : "static __shared__";
  const std::string who = fmt::format("thread {}", thread);
  const std::string them =
      other == kSeveral ? "several threads' atomics" : fmt::format("thread {}", other);
  std::string what;
  switch (kind) {
    case HazardKind::read_after_write:
      what = fmt::format("{} reads what {} wrote", who, them);
      break;
    case HazardKind::write_after_read:
      what = fmt::format("{} writes what {} read", who, them);
      break;
    case HazardKind::write_after_write:
      what = fmt::format("{} writes what {} wrote", who, them);
      break;
    case HazardKind::out_of_bounds:
      return fmt::format(
          "{}: {} accesses dynamic shared byte {}, past the {} B the launch has (at {})", where,
          who, offset, dynamic_bytes, location);
    case HazardKind::uninitialized_read:
      return fmt::format("{}: {} reads {} byte {} that no thread of the block wrote (at {})", where,
                         who, space, offset, location);
  }
  return fmt::format("{} on {} byte {}: {} with no barrier between them (at {})", where, space,
                     offset, what, location);
}

HazardError::HazardError(const Hazard& first, uint64_t count)
    : KernelFault(fmt::format("{} shared memory", first.kernel),
                  fmt::format("emu: kernel {}: shared-memory hazard: {}; {} hazardous access(es) "
                              "in that block",
                              first.kernel, first.describe(), count)),
      first_(first),
      count_(count) {}

LaunchLog take_launch_log() { return std::exchange(host.log, {}); }

void set_schedule(const Schedule& s) { host.schedule = s; }

void set_hazard_watch(bool on) { host.watch_hazards = on; }

void set_block_workers(int n) {
  if (n < 1 || n > kMaxBlockWorkers)
    throw std::runtime_error(
        fmt::format("emu: {} block workers, expected 1 to {}", n, kMaxBlockWorkers));
  host.block_workers = n;
}

}  // namespace tandem::emu

#if defined(TANDEM_EMU_HAZARDS)
// The load/store tracing callbacks of clang's -fsanitize-coverage=trace-loads,trace-stores, with
// which CMake builds the kernel sources for the emulator (never this file).
extern "C" {
#define TANDEM_TRACE(bytes)                                                                \
  void __sanitizer_cov_load##bytes(void* p) {                                              \
    tandem::emu::trace(p, bytes, tandem::emu::Access::read, __builtin_return_address(0));  \
  }                                                                                        \
  void __sanitizer_cov_store##bytes(void* p) {                                             \
    tandem::emu::trace(p, bytes, tandem::emu::Access::write, __builtin_return_address(0)); \
  }
TANDEM_TRACE(1)
TANDEM_TRACE(2)
TANDEM_TRACE(4)
TANDEM_TRACE(8)
TANDEM_TRACE(16)
#undef TANDEM_TRACE
// The coverage counters the tracing needs a section for; libFuzzer's definition wins in fuzzers.
__attribute__((weak)) void __sanitizer_cov_8bit_counters_init(char*, char*) {}
// ThreadSanitizer's module constructor: the kernel sources take -fsanitize=thread only to keep
// the optimizer from speculating loads (CMakeLists.txt); no ThreadSanitizer runtime is linked.
__attribute__((weak)) void __tsan_init() {}
}
#endif
