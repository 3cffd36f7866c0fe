// sim/residual_traffic: the simulator's bytes equal the emulator's counted bytes, launch by
// launch and traffic class by class, exactly (DESIGN section 6, validation).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "cases/residual_case.hpp"
#include "sim/residual_traffic.hpp"

namespace tandem {
namespace {

RC_GTEST_PROP(ResidualTraffic, SimulatorEqualsEmulatorCounts, ()) {
  ResidualConfig cfg;
  cfg.d = 8 * *rc::gen::inRange(1, 17);
  cfg.sites = *rc::gen::inRange(1, 4);
  const int64_t tokens = *rc::gen::inRange(1, 6);
  const auto act = *rc::gen::element(ActDType::f32, ActDType::bf16);
  const auto path = *rc::gen::element(ResidualPath::v4_unfused, ResidualPath::v41_single_pass);
  const int block = *rc::gen::element(32, 64, 256);
  const auto in = make_residual_inputs(cfg, tokens, act, 3);
  const LaunchLog counted = run_residual_stack(in, path, {Backend::emu, {}, block}).launches;
  const LaunchLog predicted = sim::predict_residual_stack(path, tokens, cfg.d, cfg.sites, act);
  RC_ASSERT(counted.size() == predicted.size());
  for (size_t i = 0; i < counted.size(); ++i) {
    RC_LOG() << counted[i].kernel << " vs " << predicted[i].kernel;
    RC_ASSERT(counted[i].kernel == predicted[i].kernel);
    for (int c = 0; c < kTrafficClasses; ++c) {
      RC_ASSERT(counted[i].read[c] == predicted[i].read[c]);
      RC_ASSERT(counted[i].written[c] == predicted[i].written[c]);
    }
  }
}

TEST(ResidualTraffic, DesignedElementsPerSite) {
  // Activation bytes per token per site over the site's launches: 20d, 10d (DESIGN 5.1).
  for (auto act : {ActDType::f32, ActDType::bf16}) {
    const int64_t d = 64, e = static_cast<int64_t>(act_bytes(act));
    const auto v4 = sim::predict_residual_stack(ResidualPath::v4_unfused, 1, d, 1, act);
    uint64_t site = 0;
    for (int i = 0; i < 5; ++i)
      if (v4[i].kernel.rfind("dense_rows", 0) != 0) site += v4[i].bytes(Traffic::activation);
    EXPECT_EQ(site, uint64_t(sim::kResidualV4Unfused * d * e));
    const auto v41 = sim::predict_residual_stack(ResidualPath::v41_single_pass, 1, d, 1, act);
    EXPECT_EQ(v41.back().bytes(Traffic::activation), uint64_t(sim::kResidualV41SinglePass * d * e));
  }
}

}  // namespace
}  // namespace tandem
