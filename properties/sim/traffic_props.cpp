// sim/traffic: the analytic model's formulas (DESIGN 5.5, 6), presets, outputs, bad input.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "sim/traffic.hpp"

namespace tandem::sim {
namespace {

const ComponentBytes& row(const std::vector<ComponentBytes>& rows, const std::string& name) {
  for (const auto& r : rows)
    if (r.component == name) return r;
  throw std::runtime_error("no row " + name);
}

TEST(Presets, KvBytesPerTokenFromTheDesign) {
  EXPECT_NEAR(builtin_preset("v4-flash").kv_bytes_per_token, 3514, 0.5);  // 21 CSA + 20 HCA
  EXPECT_EQ(builtin_preset("v4.1-flash").kv_bytes_per_token, 890);
  EXPECT_EQ(builtin_preset("v4-flash").kv_v32_bytes_per_token, 656.0 * 41);
  for (const auto& n : builtin_preset_names()) EXPECT_EQ(builtin_preset(n).name, n);
  EXPECT_THROW(builtin_preset("v9"), BadInput);
}

TEST(Traffic, ResidualSchedulesAreTwentyAndTenDPerSite) {
  const Preset p = builtin_preset("tiny");
  const Report r = simulate(p, {});
  const auto& res = row(r.prefill, "residual");
  EXPECT_EQ(res.baseline, 20.0 * p.d * p.act_bytes * 2 * p.layers);
  EXPECT_EQ(res.optimized, 10.0 * p.d * p.act_bytes * 2 * p.layers);
}

TEST(Traffic, EngramRowsRoundUpToSectors) {
  const Preset p = builtin_preset("v4.1-flash");
  const Report r = simulate(p, {});
  EXPECT_EQ(row(r.prefill, "engram").optimized, 2.0 * 24 * 288);  // 264 B -> 9 sectors
  EXPECT_FALSE(row(r.prefill, "engram").in_total);
}

RC_GTEST_PROP(Traffic, ExpectedEmittedMatchesClosedForm, ()) {
  Workload w;
  w.acceptance = *rc::gen::inRange(0, 1000) / 1000.0;
  const int g = *rc::gen::inRange(1, 9);
  const double a = w.acceptance;
  RC_ASSERT(std::fabs(expected_emitted(w, g) - (1 - std::pow(a, g + 1)) / (1 - a)) <= 1e-12);
}

TEST(Traffic, ConfidenceProfileIsASurvivalProduct) {
  Workload w;
  w.confidence = {0.9, 0.5, 0.1};
  EXPECT_DOUBLE_EQ(expected_emitted(w, 3), 1 + 0.9 + 0.45 + 0.045);
  EXPECT_DOUBLE_EQ(expected_emitted(w, 1), 1.9);
}

TEST(Traffic, LoadSetsTheVerifyBudget) {
  Workload w;
  w.high_load = true;
  EXPECT_EQ(simulate(builtin_preset("v4-flash"), w).verify_budget, 1);
  w.high_load = false;
  EXPECT_EQ(simulate(builtin_preset("v4-flash"), w).verify_budget, 5);
}

TEST(Traffic, DecodeKvGrowsWithContextAndDivisionByE) {
  Workload w;
  w.context = 1000;
  const Preset p = builtin_preset("v4.1-flash");
  const Report r = simulate(p, w);
  const double window = 128.0 * 528 * p.layers;
  EXPECT_DOUBLE_EQ(row(r.decode, "kv read").optimized,
                   (1000 * 890.0 + window) / r.expected_emitted);
  EXPECT_DOUBLE_EQ(row(r.decode, "kv read").baseline, 1000 * 656.0 * 41);
}

RC_GTEST_PROP(Vision, UnshuffleCutsTokensByNineAndCaps, ()) {
  const Image img{*rc::gen::inRange(1, 20000), *rc::gen::inRange(1, 20000)};
  const VisionImage v = vision_tokens(img);
  RC_ASSERT(v.tokens_with == int64_t{(v.grid_w + 2) / 3} * ((v.grid_h + 2) / 3));
  RC_ASSERT(v.tokens_without == int64_t{v.grid_w} * v.grid_h);
  RC_ASSERT(v.tokens_with <= 1024);
  RC_ASSERT(v.sequence_tokens == 2 + ((v.grid_h + 2) / 3) * ((v.grid_w + 2) / 3 + 1));
  RC_ASSERT(v.tokens_without <= 9 * v.tokens_with);
  if (v.grid_w % 3 == 0 && v.grid_h % 3 == 0) RC_ASSERT(v.tokens_without == 9 * v.tokens_with);
  RC_ASSERT(int64_t{v.grid_w} * 14 * v.grid_h * 14 >= 544 * 544 || v.tokens_with > 900);
}

TEST(Traffic, BadWorkloadIsBadInput) {
  Workload w;
  w.acceptance = 1.0;
  EXPECT_THROW(simulate(builtin_preset("tiny"), w), BadInput);
  w = {};
  w.batch = 0;
  EXPECT_THROW(simulate(builtin_preset("tiny"), w), BadInput);
  w = {};
  w.images = {{0, 10}};
  EXPECT_THROW(simulate(builtin_preset("tiny"), w), BadInput);
}

TEST(Presets, ShippedPresetFilesLoad) {
  const auto dir = std::filesystem::path(TANDEM_SOURCE_DIR) / "sim" / "presets";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const Preset p = load_preset(e.path());
    EXPECT_EQ(p.name + ".json", e.path().filename().string());
    EXPECT_TRUE(simulate(p, {}).engram_prefetch_hides);
    ++n;
  }
  EXPECT_GE(n, 1);
}

TEST(Traffic, PresetFileErrorsNameTheField) {
  const auto path = std::filesystem::temp_directory_path() / "tandem_preset.json";
  write_file_atomic(path, std::string_view(R"({"name":"x","layers":0})"));
  try {
    load_preset(path);
    FAIL();
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("layers"), std::string::npos) << e.what();
  }
}

TEST(Traffic, OutputsAreWrittenWithPlots) {
  const auto dir = std::filesystem::temp_directory_path() / "tandem_traffic_out";
  std::filesystem::remove_all(dir);
  write_outputs(simulate(builtin_preset("v4.1-flash"), {}), dir);
  for (const char* f : {"report.json", "report.csv", "sweep.csv", "traffic_stacked.svg",
                        "traffic_stacked.png", "traffic_savings.svg", "traffic_savings.png"})
    EXPECT_GT(std::filesystem::file_size(dir / f), 100u) << f;
  const auto j = nlohmann::json::parse(read_file(dir / "report.json"));
  EXPECT_EQ(j["preset"], "v4.1-flash");
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find("tmp"), std::string::npos) << e.path();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem::sim
