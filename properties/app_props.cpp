// app/: the tandem program's commands and exit codes (0 ok, 1 failed, 2 bad input).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/commands.hpp"
#include "core/atomic_file.hpp"
#include "core/safetensors.hpp"
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
  EXPECT_EQ(j["cases"].size(), 17u);
  EXPECT_EQ(j["cases"].back()["component"], "model");
  for (const auto& c : j["cases"]) {
    EXPECT_TRUE(c["schedules"].get<std::string>().starts_with("3 identical")) << c["schedules"];
    const std::string bytes = c["bytes"];  // counted bytes == the design / the simulator
    if (c["component"] != "dspark") {
      EXPECT_NE(bytes.find("=="), std::string::npos) << bytes;
    }
    EXPECT_EQ(bytes.find("!="), std::string::npos) << bytes;
    EXPECT_GT(c["margin"].get<double>(), 0.0);
  }
}

TEST(App, VerifyTableHasVerdicts) {
  const CliRun r = tandem({"verify", "--backend", "emu", "--schedule", "reversed", "--component",
                           "residual", "--component", "moe"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("all cases PASS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("v41-single-pass/bf16"), std::string::npos);
  EXPECT_NE(r.out.find("moe "), std::string::npos);
  for (const char* other : {"engram ", "vision ", "dspark ", "model ", "attention "})
    EXPECT_EQ(r.out.find(std::string("\n") + other), std::string::npos) << other << r.out;
  const CliRun bad = tandem({"verify", "--component", "resdual"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--component"), std::string::npos) << bad.err;
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

// ---------------------------------------------------------------- the bad-input matrix
// Every class of bad input (config, golden manifest, safetensors blob, tokens out of range,
// shapes, NaN, flags) exits 2 with a message naming the file and field, and leaves no file
// behind.

namespace fs = std::filesystem;

// The files in `dir` (names), to show nothing was written.
std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  if (fs::exists(dir))
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// A copy of one shipped golden case in its own directory, to break in one way.
struct GoldenCopy {
  fs::path dir;
  nlohmann::json manifest;
  std::string blob;  // the safetensors bytes

  explicit GoldenCopy(const std::string& name, const std::string& tag)
      : dir(fs::temp_directory_path() / ("tandem_bad_golden_" + tag)) {
    const fs::path cases = fs::path(TANDEM_SOURCE_DIR) / "golden/cases";
    fs::remove_all(dir);
    fs::create_directories(dir);
    manifest = nlohmann::json::parse(read_file(cases / (name + ".json")));
    blob = read_file(cases / (name + ".safetensors"));
  }
  // Edits one tensor of the blob (parsed and reserialised).
  template <class T, class Edit>
  void edit_tensor(const std::string& tensor, Edit edit) {
    Safetensors st = parse_safetensors(blob, "blob");
    Tensor<T> t = st.get_as<T>(tensor, "blob");
    edit(t);
    st.put(tensor, t);
    blob = serialize_safetensors(st);
  }
  // Writes both files (the manifest's SHA-256 follows the blob unless `keep_sha`).
  std::string write(bool keep_sha = false) {
    if (!keep_sha) manifest["blob_sha256"] = sha256_hex(blob);
    write_file_atomic(dir / manifest["blob"].get<std::string>(), std::string_view(blob));
    write_file_atomic(dir / (manifest["name"].get<std::string>() + ".json"),
                      std::string_view(manifest.dump(2)));
    return dir.string();
  }
};

TEST(App, BadGoldenFilesExitTwoNamingFileAndField) {
  using Edit = std::function<void(GoldenCopy&)>;
  struct Case {
    const char* tag;
    const char* component;
    Edit edit;
    std::vector<const char*> message;
  } cases[] = {
      {"version",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.manifest["format_version"] = 99; },
       {"dspark_verify_greedy.json", "format_version"}},
      {"component",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.manifest["component"] = "warp-drive"; },
       {"component", "warp-drive"}},
      {"rule",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.manifest["outputs"]["accepted"]["rule"] = "close"; },
       {"outputs.accepted", "close"}},
      {"unknown_key",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.manifest["colour"] = 1; },
       {"colour"}},
      {"config_type",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.manifest["config"]["greedy"] = "yes"; },
       {"config.greedy"}},
      {"sha",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.blob[100] ^= 1; },
       {"blob_sha256", "SHA-256"}},
      {"blob_path",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.manifest["blob"] = "../../etc/passwd"; },
       {"blob"}},
      {"truncated",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.blob.resize(g.blob.size() / 2); },
       {"dspark_verify_greedy.safetensors"}},
      {"header",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.blob.replace(8, 4, "{{{{"); },
       {"dspark_verify_greedy.safetensors"}},
      {"shape",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.manifest["config"]["requests"] = 9; },
       {"dspark_verify_greedy.safetensors", "draft", "9x4"}},
      {"token",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.edit_tensor<int32_t>("draft", [](auto& t) { t.data[5] = 100; }); },
       {"dspark_verify_greedy.safetensors", "drafted token 1 of request 1", "100"}},
      {"nan",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.edit_tensor<float>("p_target", [](auto& t) { t.data[7] = NAN; }); },
       {"dspark_verify_greedy.safetensors", "p_target[0, 0, 7]", "nan"}},
      {"last_token",
       "dspark_drafter",
       [](GoldenCopy& g) { g.edit_tensor<int32_t>("last", [](auto& t) { t.data[0] = -4; }); },
       {"dspark_drafter.safetensors", "'last'", "-4"}},
      {"empty",
       "vision_100x40_f32",
       [](GoldenCopy& g) { g.manifest["config"]["vision"]["image_w"] = 0; },
       {"config.vision.image_w"}},
      {"huge",
       "residual_v4_bf16_d8",
       [](GoldenCopy& g) { g.manifest["config"]["residual"]["d"] = 1 << 20; },
       {"config.residual.d"}},
  };
  for (Case& c : cases) {
    GoldenCopy g(c.component, c.tag);
    c.edit(g);
    const std::string dir = g.write(std::string(c.tag) == "sha");
    const auto before = listing(dir);
    const CliRun r = tandem({"golden", "check", "--backend", "emu", "--dir", dir});
    EXPECT_EQ(r.code, 2) << c.tag << "\n" << r.out << r.err;
    for (const char* part : c.message)
      EXPECT_NE(r.err.find(part), std::string::npos) << c.tag << ": " << r.err;
    EXPECT_EQ(listing(dir), before) << c.tag;
    // regen over a broken case refuses to replace it (exit 1) and leaves no temporary file
    const std::string manifest_text =
        read_file(fs::path(dir) / (std::string(c.component) + ".json"));
    const CliRun regen = tandem({"golden", "regen", "--dir", dir, c.component});
    EXPECT_EQ(regen.code, 1) << c.tag << "\n" << regen.out;
    EXPECT_EQ(read_file(fs::path(dir) / (std::string(c.component) + ".json")), manifest_text);
    for (const auto& name : listing(dir)) EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;
    fs::remove_all(dir);
  }
}

TEST(App, BadConfigsAndFlagsExitTwoNamingTheField) {
  struct Case {
    std::string config;  // config text
    std::vector<const char*> message;
  } cases[] = {
      {R"({"name":"x"})", {"seed", "missing"}},
      {R"([1, 2])", {"tandem_cfg.json", "must be a JSON object"}},
      {R"({"name":"x","seed":1,"residual":{"d":1e999}})", {"tandem_cfg.json", "1e999"}},
      {"\xff\xfe", {"tandem_cfg.json"}},
  };
  for (const Case& c : cases) {
    const std::string path = temp_file("tandem_cfg.json", c.config);
    const CliRun r = tandem({"verify", "--config", path});
    EXPECT_EQ(r.code, 2) << c.config << "\n" << r.err;
    for (const char* part : c.message)
      EXPECT_NE(r.err.find(part), std::string::npos) << c.config << ": " << r.err;
  }
  // traffic: flags out of range, and --out never leaves a partial report behind
  const fs::path out = fs::temp_directory_path() / "tandem_bad_traffic_out";
  fs::remove_all(out);
  const std::pair<std::vector<std::string>, const char*> flags[] = {
      {{"traffic", "--batch", "0", "--out", out.string()}, "--batch"},
      {{"traffic", "--context", "-5", "--out", out.string()}, "--context"},
      {{"traffic", "--confidence", "0.5,nan", "--out", out.string()}, "--confidence"},
      {{"traffic", "--image", "0x10", "--out", out.string()}, "--image"},
  };
  for (const auto& [args, message] : flags) {
    const CliRun r = tandem(args);
    EXPECT_EQ(r.code, 2) << message << "\n" << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_TRUE(listing(out).empty()) << message;
  }
  const std::string file = temp_file("tandem_not_a_dir", "x");
  const CliRun r = tandem({"traffic", "--out", file});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("tandem_not_a_dir"), std::string::npos) << r.err;
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
