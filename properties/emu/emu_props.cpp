// optimized/emu: CUDA semantics on the CPU, schedules that expose races, byte counting.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <numeric>
#include <thread>

#include "core/device_limits.hpp"
#include "core/error.hpp"
#include "emu_test_kernels.hpp"
#include "optimized/emu/hazard.hpp"
#include "optimized/emu/schedule.hpp"

namespace tandem {
namespace {

std::vector<float> iota_floats(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = 1.0f + i;
  return v;
}

// Switches the hazard check for a scope (it is process-wide), back as it was at the end.
class HazardCheckScope {
 public:
  explicit HazardCheckScope(bool on) : was_(emu::hazard_check()) { emu::set_hazard_check(on); }
  ~HazardCheckScope() { emu::set_hazard_check(was_); }

 private:
  bool was_;
};

TEST(Emu, ScheduleCheckCatchesAMissingBarrier) {
  // The schedules alone, as on a build without the detector (which would stop the launch first).
  const HazardCheckScope off(false);
  const auto in = iota_floats(64);
  const auto schedules = emu::test_schedules();
  ASSERT_GE(schedules.size(), 3u);
  bool differs = false;
  const auto first = emu_test::racy_neighbour_sum(in, schedules[0]);
  for (const auto& s : schedules) differs |= emu_test::racy_neighbour_sum(in, s) != first;
  EXPECT_TRUE(differs) << "the racy kernel gave identical results under every schedule";
}

TEST(Emu, RaceFreeKernelIsIdenticalUnderEverySchedule) {
  const auto in = iota_floats(64);
  std::vector<float> want(64);
  for (int i = 0; i < 64; ++i) want[i] = in[i] + in[(i + 1) % 64];
  for (const auto& s : emu::test_schedules())
    EXPECT_EQ(emu_test::neighbour_sum(in, s), want) << s.name();
}

TEST(Emu, FullWarpShuffles) {
  std::vector<int> in(128);
  std::iota(in.begin(), in.end(), 5);
  for (const auto& s : emu::test_schedules()) {
    const auto r = emu_test::warp_shuffles(in, 64, s);
    for (int i = 0; i < 128; ++i) {
      const int warp = i / 32, lane = i % 32;
      int sum = 0;
      for (int k = 0; k < 32; ++k) sum += in[warp * 32 + k];
      ASSERT_EQ(r.xor_sum[i], sum) << s.name() << " thread " << i;
      ASSERT_EQ(r.broadcast[i], in[warp * 32 + 3]);
      ASSERT_EQ(r.down[i], lane == 31 ? in[i] : in[i + 1]);
    }
  }
}

// The emulator's one-exchange warp_sum and warp_max are the GPU's butterflies of shuffles bit for
// bit, on every lane, under every schedule: values of near magnitudes and mixed signs (every
// rounding matters), signed zeros (fmaxf of +0 and -0), infinities (NaN where +inf meets -inf).
RC_GTEST_PROP(Emu, WarpReductionsInOneExchangeAreTheButterfliesOfShuffles, ()) {
  const int warps = *rc::gen::inRange(1, 5);
  std::vector<float> in(size_t(warps) * 32);
  for (float& v : in) {
    const int kind = *rc::gen::inRange(0, 400);  // mostly finite: an inf swamps the roundings
    v = kind == 0   ? 0.0f
        : kind == 1 ? -0.0f
        : kind == 2 ? INFINITY
        : kind == 3
            ? -INFINITY
            : std::ldexp(*rc::gen::inRange(-1 << 23, 1 << 23) / float(1 << 23),
                         *rc::gen::inRange(-4, 5));  // near magnitudes: roundings differ by order
  }
  for (const bool max : {false, true})
    for (const auto& s : emu::test_schedules()) {
      const emu_test::WarpReductions r = emu_test::warp_reductions(in, 32 * warps, max, s);
      for (size_t i = 0; i < in.size(); ++i)
        if (std::isnan(r.shuffles[i]))  // a NaN sum's payload may come from either operand
          RC_ASSERT(std::isnan(r.one_exchange[i]));
        else
          RC_ASSERT(std::bit_cast<uint32_t>(r.one_exchange[i]) ==
                    std::bit_cast<uint32_t>(r.shuffles[i]));
    }
}

TEST(Emu, AtomicsCountEveryThread) {
  for (const auto& s : emu::test_schedules()) EXPECT_EQ(emu_test::atomic_count(3, 96, s), 288);
}

TEST(Emu, DynamicSharedMemoryPerBlock) {
  std::vector<int> in(4 * 64);
  std::iota(in.begin(), in.end(), 0);
  for (const auto& s : emu::test_schedules()) {
    const auto sums = emu_test::dynamic_shared_block_sums(in, 64, s);
    for (int b = 0; b < 4; ++b) EXPECT_EQ(sums[b], 64 * 64 * b + 63 * 64 / 2) << s.name();
  }
}

TEST(Emu, DynamicSharedMemoryPastTheDefaultNeedsTheAttribute) {
  EXPECT_EQ(emu_test::dynamic_shared_sum(kDefaultDynamicShared, 0), 64);
  EXPECT_THROW(emu_test::dynamic_shared_sum(kDefaultDynamicShared + 4, 0), std::runtime_error);
  EXPECT_EQ(emu_test::dynamic_shared_sum(kMaxDynamicShared, kMaxDynamicShared), 64);
  EXPECT_THROW(emu_test::dynamic_shared_sum(kMaxDynamicShared + 4, kMaxDynamicShared),
               std::runtime_error);  // past the attribute
  EXPECT_THROW(emu_test::dynamic_shared_sum(kMaxDynamicShared, kMaxDynamicShared + 4),
               std::runtime_error);  // sm_90 grants at most 227 KiB
}

TEST(Emu, TwoDimensionalIndicesCoverTheGridOnce) {
  for (const auto& s : emu::test_schedules()) {
    const auto ids = emu_test::thread_ids(3, 2, 8, 4, s);
    for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], static_cast<int>(i)) << s.name();
  }
}

TEST(Emu, CountsGlobalBytesPerLaunch) {
  const LaunchCounts c = emu_test::vector_copy_counts(1000);
  EXPECT_EQ(c.kernel, "vector_copy");
  EXPECT_EQ(c.read_bytes(Traffic::activation), 4000u);
  EXPECT_EQ(c.written_bytes(Traffic::activation), 4000u);
  EXPECT_EQ(c.bytes(Traffic::weight), 0u);
}

// Sets this host thread's block workers for a scope, back to one at the end.
class BlockWorkersScope {
 public:
  explicit BlockWorkersScope(int n) { emu::set_block_workers(n); }
  ~BlockWorkersScope() { emu::set_block_workers(1); }
  BlockWorkersScope(const BlockWorkersScope&) = delete;
  BlockWorkersScope& operator=(const BlockWorkersScope&) = delete;
};

// Blocks on several host threads: each has its own static __shared__ instance (a shared one would
// mix the blocks' sums), global atomics are atomic across them, byte counts add up, and every
// result is the one blocks run one after another give (a block's thread orders are its own).
TEST(EmuBlockWorkers, ResultsAndCountsDoNotDependOnThem) {
  constexpr int kBlocks = 40, kBlock = 64;
  std::vector<int> in(kBlocks * kBlock);
  std::iota(in.begin(), in.end(), 0);
  std::vector<int> sums(kBlocks);
  for (int b = 0; b < kBlocks; ++b) sums[b] = kBlock * kBlock * b + kBlock * (kBlock - 1) / 2;
  std::vector<float> values(kBlocks * kBlock);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = std::ldexp(1.0f + float(i % 7), int(i % 9));
  const LaunchCounts one_copy = emu_test::vector_copy_counts(100000);
  for (const auto& s : emu::test_schedules()) {
    const auto reductions = emu_test::warp_reductions(values, kBlock, false, s);
    for (const int workers : {2, 3, 8}) {
      const BlockWorkersScope scope(workers);
      const std::string where = fmt::format("{} workers, {}", workers, s.name());
      EXPECT_EQ(emu_test::static_shared_block_sums(in, kBlock, s), sums) << where;
      EXPECT_EQ(emu_test::dynamic_shared_block_sums(in, kBlock, s), sums) << where;
      EXPECT_EQ(emu_test::atomic_count(kBlocks, 96, s), kBlocks * 96) << where;
      const auto ids = emu_test::thread_ids(5, 3, 8, 4, s);
      for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], static_cast<int>(i)) << where;
      const auto again = emu_test::warp_reductions(values, kBlock, false, s);
      EXPECT_EQ(again.one_exchange, reductions.one_exchange) << where;
      EXPECT_EQ(again.shuffles, reductions.shuffles) << where;
      const LaunchCounts copy = emu_test::vector_copy_counts(100000);
      EXPECT_EQ(copy.read, one_copy.read) << where;
      EXPECT_EQ(copy.written, one_copy.written) << where;
    }
  }
  EXPECT_THROW(emu::set_block_workers(0), std::runtime_error);
  EXPECT_THROW(emu::set_block_workers(emu::kMaxBlockWorkers + 1), std::runtime_error);
}

// A block's thread order is its own stream of the schedule, whichever host thread runs it and
// after whichever blocks: the racy kernel through dynamic shared memory (NaN where a neighbour had
// not yet written: the bits follow the order; the detector off) gives the same bits on 1, 3 or 8
// workers, and the shuffled schedule's differ from the in-order one's.
TEST(EmuBlockWorkers, ABlocksThreadOrderIsItsOwn) {
  const HazardCheckScope off(false);
  constexpr int kBlocks = 24;
  const auto in = iota_floats(kBlocks * 64);
  auto bits = [](const std::vector<float>& v) {
    std::vector<uint32_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = std::bit_cast<uint32_t>(v[i]);
    return b;
  };
  const auto schedules = emu::test_schedules();
  EXPECT_NE(bits(emu_test::racy_dynamic_neighbour_sum(in, schedules[0], kBlocks)),
            bits(emu_test::racy_dynamic_neighbour_sum(in, schedules[2], kBlocks)));
  for (const auto& s : schedules) {
    const auto one = bits(emu_test::racy_dynamic_neighbour_sum(in, s, kBlocks));
    for (const int workers : {3, 8}) {
      const BlockWorkersScope scope(workers);
      EXPECT_EQ(bits(emu_test::racy_dynamic_neighbour_sum(in, s, kBlocks)), one)
          << workers << ", " << s.name();
    }
  }
}

// Launches from several host threads at once (verify's rows): each thread's blocks use its own
// static __shared__ instance.
TEST(EmuBlockWorkers, LaunchesFromSeveralHostThreadsRunAtOnce) {
  constexpr int kBlocks = 16, kBlock = 64;
  std::vector<int> in(kBlocks * kBlock);
  std::iota(in.begin(), in.end(), 0);
  const auto want = emu_test::static_shared_block_sums(in, kBlock, {});
  std::atomic<int> wrong{0};
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 3; ++t)
      threads.emplace_back([&, t] {
        const BlockWorkersScope scope(1 + t);
        for (int k = 0; k < 20; ++k)
          wrong += emu_test::static_shared_block_sums(in, kBlock,
                                                      emu::test_schedules()[size_t(t)]) != want;
      });
  }
  EXPECT_EQ(wrong, 0);
}

TEST(Emu, DivergentBarrierIsReportedNotHung) {
  EXPECT_THROW(emu_test::divergent_barrier(), std::runtime_error);
}

// ---- the shared-memory hazard detector

using emu_test::Pattern;

// Skips where the build has no load/store tracing (a compiler other than clang).
#define REQUIRE_HAZARD_CHECK() \
  if (!emu::hazard_check_built()) GTEST_SKIP() << "built without clang's load/store tracing"

const emu::Schedule kInOrder{emu::Order::in_order, 0}, kReversed{emu::Order::reversed, 0};

// The first hazard found under `s`, which must be one.
emu::Hazard hazard(Pattern p, const emu::Schedule& s) {
  const auto h = emu_test::hazard_of(p, s);
  if (!h) ADD_FAILURE() << "no hazard reported under " << s.name();
  return h.value_or(emu::Hazard{});
}

void expect_hazard(const emu::Hazard& h, emu::HazardKind kind, unsigned thread, unsigned other) {
  EXPECT_EQ(h.kernel, "hazard_pattern");
  EXPECT_EQ(emu::hazard_kind_name(h.kind), emu::hazard_kind_name(kind)) << h.describe();
  EXPECT_EQ(h.thread, thread) << h.describe();
  EXPECT_EQ(h.other, other) << h.describe();
}

TEST(EmuHazards, TheRacyKernelIsReportedUnderEverySchedule) {
  REQUIRE_HAZARD_CHECK();
  const auto in = iota_floats(64);
  for (const auto& s : emu::test_schedules()) {
    try {
      emu_test::racy_neighbour_sum(in, s);
      ADD_FAILURE() << "no hazard reported under " << s.name();
    } catch (const emu::HazardError& e) {
      EXPECT_EQ(e.first().kernel, "neighbour_sum");
      EXPECT_NE(std::string(e.what()).find("neighbour_sum"), std::string::npos);
      EXPECT_GT(e.count(), 1u);  // every thread's read of its neighbour races
    }
  }
}

// RunOptions::watch_hazards (check_schedules' reruns): a host thread's launches go unwatched,
// their block workers' included, while another host thread's stay watched.
TEST(EmuHazards, AnUnwatchedHostThreadRunsTheRacyKernelUnreported) {
  REQUIRE_HAZARD_CHECK();
  const auto in = iota_floats(64);
  const emu::Schedule s = emu::test_schedules()[0];
  struct Unwatched {
    Unwatched() { emu::set_hazard_watch(false); }
    ~Unwatched() { emu::set_hazard_watch(true); }
  };
  {
    const Unwatched off;
    const BlockWorkersScope workers(2);
    EXPECT_NO_THROW(emu_test::racy_neighbour_sum(in, s, 2));
    std::thread other([&] { EXPECT_THROW(emu_test::racy_neighbour_sum(in, s), emu::HazardError); });
    other.join();
  }
  EXPECT_THROW(emu_test::racy_neighbour_sum(in, s, 2), emu::HazardError);
}

TEST(EmuHazards, AMissingBarrierIsReadAfterWriteOrWriteAfterRead) {
  REQUIRE_HAZARD_CHECK();
  const emu::Hazard h = hazard(Pattern::missing_barrier, kInOrder);
  expect_hazard(h, emu::HazardKind::read_after_write, 1, 0);
  EXPECT_FALSE(h.dynamic);
  EXPECT_EQ(h.block, (std::array<unsigned, 3>{0, 0, 0}));
  EXPECT_NE(h.location, "?");
  expect_hazard(hazard(Pattern::missing_barrier, kReversed), emu::HazardKind::write_after_read, 0,
                1);
}

TEST(EmuHazards, TwoWritersWithoutABarrier) {
  REQUIRE_HAZARD_CHECK();
  expect_hazard(hazard(Pattern::write_write, kInOrder), emu::HazardKind::write_after_write, 33, 0);
  expect_hazard(hazard(Pattern::write_write, kReversed), emu::HazardKind::write_after_write, 0, 33);
}

TEST(EmuHazards, AWriterAfterManyReadersNamesAnotherThread) {
  REQUIRE_HAZARD_CHECK();
  expect_hazard(hazard(Pattern::many_readers_one_writer, kInOrder),
                emu::HazardKind::write_after_read, 5, 0);
  // Warp 1 read first: the writer in warp 0 races with it.
  expect_hazard(hazard(Pattern::many_readers_one_writer, kReversed),
                emu::HazardKind::write_after_read, 5, 63);
}

TEST(EmuHazards, SyncwarpOrdersItsWarpOnly) {
  REQUIRE_HAZARD_CHECK();
  expect_hazard(hazard(Pattern::missing_syncwarp, kInOrder), emu::HazardKind::read_after_write, 1,
                0);
  expect_hazard(hazard(Pattern::syncwarp_across_warps, kInOrder), emu::HazardKind::read_after_write,
                32, 0);
  // A shuffle moves registers; it does not order shared memory (CUDA's memory model).
  expect_hazard(hazard(Pattern::shuffle_is_no_fence, kInOrder), emu::HazardKind::read_after_write,
                1, 0);
  for (const auto& s : emu::test_schedules()) {
    EXPECT_FALSE(emu_test::hazard_of(Pattern::syncwarp, s)) << s.name();
    EXPECT_FALSE(emu_test::hazard_of(Pattern::warp_reads_then_syncwarp, s)) << s.name();
  }
}

TEST(EmuHazards, AtomicsRaceOnlyWithPlainAccesses) {
  REQUIRE_HAZARD_CHECK();
  for (const auto& s : emu::test_schedules()) {
    ASSERT_FALSE(emu_test::hazard_of(Pattern::atomics, s)) << s.name();
    const auto values = emu_test::pattern_values(Pattern::atomics, s);
    for (int i = 0; i < emu_test::kHazardBlock; ++i)
      EXPECT_EQ(values[i], (i == 0 ? 64 : i) + 64) << s.name() << " thread " << i;
  }
  expect_hazard(hazard(Pattern::atomic_after_plain, kInOrder), emu::HazardKind::write_after_write,
                1, 0);
  expect_hazard(hazard(Pattern::atomic_after_plain, kReversed), emu::HazardKind::write_after_write,
                0, emu::Hazard::kSeveral);
}

TEST(EmuHazards, ReadsOfSharedMemoryTheBlockNeverWrote) {
  REQUIRE_HAZARD_CHECK();
  for (const auto& s : emu::test_schedules()) {
    const emu::Hazard st = hazard(Pattern::uninitialized_static, s);
    EXPECT_EQ(st.kind, emu::HazardKind::uninitialized_read) << st.describe();
    EXPECT_EQ(st.other, emu::Hazard::kNoOther);
    EXPECT_FALSE(st.dynamic);
    const emu::Hazard dy = hazard(Pattern::uninitialized_dynamic, s);
    EXPECT_EQ(dy.kind, emu::HazardKind::uninitialized_read) << dy.describe();
    EXPECT_TRUE(dy.dynamic);
    EXPECT_EQ(dy.offset, (emu_test::kHazardBlock - 1 - dy.thread) * sizeof(int));
    // What block 0 left in shared memory is not block 1's: a GPU gives each block its own.
    const emu::Hazard prev = hazard(Pattern::previous_block, s);
    EXPECT_EQ(prev.kind, emu::HazardKind::uninitialized_read) << prev.describe();
    EXPECT_EQ(prev.block, (std::array<unsigned, 3>{1, 0, 0}));
  }
}

TEST(EmuHazards, AtomicsOfOneWarpAreOrderedBySyncwarp) {
  REQUIRE_HAZARD_CHECK();
  for (const auto& s : emu::test_schedules())
    EXPECT_FALSE(emu_test::hazard_of(Pattern::atomics_then_syncwarp, s)) << s.name();
  // Atomics by two warps, then a plain read with no barrier: the report names them as several.
  expect_hazard(hazard(Pattern::read_after_atomics, kInOrder), emu::HazardKind::read_after_write,
                40, emu::Hazard::kSeveral);
}

// The detector skips the cells of a word that a warp's lanes have read in this interval (the
// word's summary); a write of one of its bytes must end that, or the rereads that follow go
// unseen.
TEST(EmuHazards, ReadOnlySummariesEndAtAPartialWriteAndASyncwarp) {
  REQUIRE_HAZARD_CHECK();
  expect_hazard(hazard(Pattern::reread_around_a_byte_write, kInOrder),
                emu::HazardKind::write_after_read, 33, 0);
  // The write races with warp 0's first reads (one report), then each of its 2 x 32 rereads
  // races with the write (a read finding a hazard leaves no summary covering its thread).
  EXPECT_EQ(emu_test::hazard_count_of(Pattern::reread_around_a_byte_write, kInOrder), 65u);
  // A summary made before a __syncwarp does not cover the warp after it: its rereads are new
  // readers, which the write races with.
  expect_hazard(hazard(Pattern::reread_after_syncwarp_then_write, kInOrder),
                emu::HazardKind::read_after_write, 1, 0);
  expect_hazard(hazard(Pattern::reread_after_syncwarp_then_write, kReversed),
                emu::HazardKind::write_after_read, 0, 31);
}

// A word's four bytes share one cell until an access covers part of the word: then each byte
// has its own, starting from the word's state (a write of the whole word earlier in the interval
// still races with a byte write), and bytes written by different threads do not race.
TEST(EmuHazards, PartialAccessesSplitAWordIntoItsBytes) {
  REQUIRE_HAZARD_CHECK();
  for (const auto& s : emu::test_schedules())
    EXPECT_FALSE(emu_test::hazard_of(Pattern::bytes_of_one_word, s)) << s.name();
  expect_hazard(hazard(Pattern::byte_write_then_word_read, kInOrder),
                emu::HazardKind::read_after_write, 1, 0);
  expect_hazard(hazard(Pattern::byte_write_then_word_read, kReversed),
                emu::HazardKind::write_after_read, 0, 1);
  expect_hazard(hazard(Pattern::word_write_then_byte_write, kInOrder),
                emu::HazardKind::write_after_write, 33, 0);
  expect_hazard(hazard(Pattern::word_write_then_byte_write, kReversed),
                emu::HazardKind::write_after_write, 0, 33);
}

TEST(EmuHazards, DynamicSharedMemoryPastTheLaunchsSize) {
  REQUIRE_HAZARD_CHECK();
  const emu::Hazard h = hazard(Pattern::dynamic_overrun, kInOrder);
  EXPECT_EQ(h.kind, emu::HazardKind::out_of_bounds) << h.describe();
  EXPECT_EQ(h.offset, (emu_test::kHazardBlock + 1) * sizeof(int));
  EXPECT_EQ(h.dynamic_bytes, emu_test::kHazardBlock * sizeof(int));
  EXPECT_NE(h.describe().find("past the 256 B the launch has"), std::string::npos) << h.describe();
}

// The report is the first failing block's in the schedule's block order, whichever host thread
// ran it: every block before it has run when the launch stops.
TEST(EmuHazards, ReportsDoNotDependOnBlockWorkers) {
  REQUIRE_HAZARD_CHECK();
  int reported = 0;
  for (int p = 0; p <= int(Pattern::word_write_then_byte_write); ++p)
    for (const auto& s : emu::test_schedules()) {
      const auto one = emu_test::hazard_of(Pattern(p), s);
      const uint64_t count = emu_test::hazard_count_of(Pattern(p), s);
      const BlockWorkersScope scope(2);
      const auto two = emu_test::hazard_of(Pattern(p), s);
      ASSERT_EQ(one.has_value(), two.has_value()) << "pattern " << p << ", " << s.name();
      if (!one) continue;
      ++reported;
      EXPECT_EQ(one->describe(), two->describe()) << "pattern " << p << ", " << s.name();
      EXPECT_EQ(count, emu_test::hazard_count_of(Pattern(p), s));
    }
  EXPECT_GT(reported, 30);
  // Every block of the racy kernel races: the report is the first block of the schedule's
  // order, not the first to fail in time, however the blocks spread over the workers.
  const auto in = iota_floats(24 * 64);
  for (const auto& s : emu::test_schedules()) {
    auto first_block = [&] {
      try {
        emu_test::racy_neighbour_sum(in, s, 24);
      } catch (const emu::HazardError& e) {
        return std::to_string(e.first().block[0]) + ": " + e.first().describe();
      }
      return std::string("no hazard");
    };
    const std::string one = first_block();
    const BlockWorkersScope scope(8);
    for (int k = 0; k < 5; ++k) EXPECT_EQ(first_block(), one) << s.name();
  }
}

TEST(EmuHazards, OffMeansUnchecked) {
  REQUIRE_HAZARD_CHECK();
  {
    const HazardCheckScope off(false);
    EXPECT_FALSE(emu_test::hazard_of(Pattern::missing_barrier, kInOrder));
  }
  EXPECT_TRUE(emu_test::hazard_of(Pattern::missing_barrier, kInOrder));
}

// Device arrays' guard zones (optimized/device_array.cuh): what ASan finds on the host, the
// emulator finds for kernels in every build.
TEST(EmuGuards, AReadOutsideAnArrayReadsPoison) {
  std::vector<float> in(64);
  std::iota(in.begin(), in.end(), 1.0f);
  const std::vector<float> after = emu_test::shifted_copy(in, emu_test::Overrun::read, 1);
  EXPECT_TRUE(std::isnan(after.back()));
  for (size_t i = 0; i + 1 < in.size(); ++i) EXPECT_EQ(after[i], in[i + 1]);
  const std::vector<float> before = emu_test::shifted_copy(in, emu_test::Overrun::read, -1);
  EXPECT_TRUE(std::isnan(before.front()));
  EXPECT_EQ(emu_test::shifted_copy(in, emu_test::Overrun::read, 0), in);
}

TEST(EmuGuards, AWriteOutsideAnArrayIsAKernelFault) {
  std::vector<float> in(64);
  std::iota(in.begin(), in.end(), 1.0f);
  auto message = [&](int shift) {
    try {
      emu_test::shifted_copy(in, emu_test::Overrun::write, shift);
    } catch (const KernelFault& e) {
      return std::string(e.what());
    }
    return std::string("no fault");
  };
  EXPECT_PRED_FORMAT2(testing::IsSubstring, "array of 256 bytes (64 elements): byte 256 ",
                      message(1));
  EXPECT_PRED_FORMAT2(testing::IsSubstring, "array of 256 bytes (64 elements): byte -4 ",
                      message(-1));
  EXPECT_EQ(message(0), "no fault");
}

TEST(EmuGuardsDeathTest, AnArrayNeverDownloadedReportsAsItDies) {
  const std::vector<float> in(32, 1.0f);
  EXPECT_DEATH(emu_test::shifted_copy(in, emu_test::Overrun::write, 1, false),
               "a kernel wrote outside a device array of 128 bytes");
}

TEST(Emu, ScheduleNamesParse) {
  for (const auto& s : emu::test_schedules())
    EXPECT_EQ(emu::parse_schedule(s.name()).name(), s.name());
  EXPECT_ANY_THROW(emu::parse_schedule("sideways"));
}

}  // namespace
}  // namespace tandem
