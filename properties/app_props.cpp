// app/: the tandem program's commands and exit codes (0 ok, 1 failed, 2 bad input).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/commands.hpp"
#include "core/atomic_file.hpp"
#include "optimized/backend.hpp"

namespace tandem {
namespace {

struct CliRun {
  int code;
  std::string out, err;
};

CliRun tandem(std::vector<std::string> args) {
  args.insert(args.begin(), "tandem");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = app::run(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

std::string temp_file(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / name;
  write_file_atomic(p, std::string_view(text));
  return p.string();
}

TEST(App, InfoNamesTheBackends) {
  const CliRun r = tandem({"info"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("emu available"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("best backend"), std::string::npos);
}

TEST(App, VerifyJsonPassesOnTheEmulator) {
  const CliRun r = tandem({"verify", "--json", "--backend", "emu"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["pass"].get<bool>());
  EXPECT_EQ(j["cases"].size(), 12u);
  for (const auto& c : j["cases"]) {
    EXPECT_EQ(c["schedules"], "3 identical");
    const std::string bytes = c["bytes"];  // counted bytes == the design / the simulator
    if (c["component"] != "dspark") EXPECT_NE(bytes.find("=="), std::string::npos) << bytes;
    EXPECT_EQ(bytes.find("!="), std::string::npos) << bytes;
    EXPECT_GT(c["margin"].get<double>(), 0.0);
  }
}

TEST(App, VerifyTableHasVerdicts) {
  const CliRun r = tandem({"verify", "--backend", "emu", "--schedule", "reversed"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("all cases PASS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("v41-single-pass/bf16"), std::string::npos);
}

TEST(App, BadInputExitsTwoNamingTheProblem) {
  const auto bad_field = temp_file(
      "tandem_bad_cfg.json",
      R"({"name":"x","seed":1,"residual":{"hc_mult":4,"d":10,"sinkhorn_iters":20,"hc_eps":1e-6,"norm_eps":1e-6,"sites":2,"tokens":2},"engram":{},"vision":{}})");
  struct Case {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"verify", "--config", bad_field}, "residual.d"},
      {{"verify", "--config", "/nonexistent.json"}, "/nonexistent.json"},
      {{"verify", "--config", temp_file("tandem_broken.json", "{")}, "invalid JSON"},
      {{"verify", "--model", "huge"}, "huge"},
      {{"verify", "--schedule", "sideways"}, "--schedule"},
      {{"verify", "--block-threads", "48"}, "--block-threads"},
      {{"verify", "--frobnicate"}, "frobnicate"},
      {{"verify", "--backend", "tpu"}, "--backend"},
      {{"golden", "check", "--dir", "/nonexistent"}, "/nonexistent"},
      {{"golden", "check", "no_such_case"}, "no golden cases matched"},
      {{"traffic", "--preset", "v9"}, "v9"},
      {{"traffic", "--image", "12y4"}, "--image"},
      {{"traffic", "--acceptance", "1.5"}, "--acceptance"},
      {{"traffic", "--preset-file", "/nonexistent.json"}, "/nonexistent.json"},
      {{}, "subcommand"},
  };
  for (const auto& c : cases) {
    const CliRun r = tandem(c.args);
    EXPECT_EQ(r.code, 2) << c.message << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
}

TEST(App, CudaBackendWithoutDeviceIsBadInput) {
  if (cuda_status().available) GTEST_SKIP() << "a CUDA device is present";
  const CliRun r = tandem({"verify", "--backend", "cuda"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("cuda"), std::string::npos) << r.err;
}

TEST(App, GoldenListAndCheck) {
  const CliRun list = tandem({"golden", "list"});
  EXPECT_EQ(list.code, 0);
  EXPECT_NE(list.out.find("residual_v41_bf16"), std::string::npos) << list.out;
  const CliRun check = tandem({"golden", "check", "--backend", "emu", "residual_v4_f32"});
  EXPECT_EQ(check.code, 0) << check.out << check.err;
  EXPECT_NE(check.out.find("PASS"), std::string::npos);
}

TEST(App, TrafficJson) {
  const CliRun r = tandem({"traffic", "--preset", "v4-flash", "--load", "low", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["dspark"]["verify_budget"], 5);
  EXPECT_EQ(j["decode_per_generated_token"].size(), 4u);
}

TEST(App, HelpForEveryCommand) {
  for (auto args : std::vector<std::vector<std::string>>{{"--help"},
                                                         {"verify", "--help"},
                                                         {"golden", "--help"},
                                                         {"info", "--help"},
                                                         {"traffic", "--help"}}) {
    const CliRun r = tandem(args);
    EXPECT_EQ(r.code, 0);
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace tandem
