// optimized/emu: CUDA semantics on the CPU, schedules that expose races, byte counting.
#include <gtest/gtest.h>

#include <numeric>

#include "emu_test_kernels.hpp"
#include "optimized/emu/schedule.hpp"

namespace tandem {
namespace {

std::vector<float> iota_floats(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = 1.0f + i;
  return v;
}

TEST(Emu, ScheduleCheckCatchesAMissingBarrier) {
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

TEST(Emu, DivergentBarrierIsReportedNotHung) {
  EXPECT_THROW(emu_test::divergent_barrier(), std::runtime_error);
}

TEST(Emu, ScheduleNamesParse) {
  for (const auto& s : emu::test_schedules())
    EXPECT_EQ(emu::parse_schedule(s.name()).name(), s.name());
  EXPECT_ANY_THROW(emu::parse_schedule("sideways"));
}

}  // namespace
}  // namespace tandem
