// app/: the tandem program's commands and exit codes (0 ok, 1 failed, 2 bad input).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "app/commands.hpp"
#include "app/verify.hpp"
#include "case_budget.hpp"
#include "cases/case_check.hpp"
#include "cases/engram_case.hpp"
#include "core/atomic_file.hpp"
#include "core/model_config.hpp"
#include "core/safetensors.hpp"
#include "optimized/backend.hpp"
#include "optimized/emu/hazard.hpp"
#include "sim/traffic.hpp"
#include "synthetic_checkpoint.hpp"
#include "test_dir.hpp"

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

std::string temp_file(const TestDir& dir, const std::string& name, const std::string& text) {
  const auto p = dir / name;
  write_file_atomic(p, std::string_view(text));
  return p.string();
}

const std::string kShipped = std::string(TANDEM_SOURCE_DIR) + "/golden/cases";

// A verify row fails on its first failing tensor (named, with its summary; the smallest margin
// reported) and on counted bytes that differ from the simulator's, whatever the tensors said.
TEST(VerifyRows, FailOnTheFirstFailingTensorAndOnBytesTheSimulatorDidNotPredict) {
  CompareResult ok, near, bad, worse;
  ok.pass = near.pass = true, bad.pass = worse.pass = false;
  ok.worst_ratio = 0.25, near.worst_ratio = 0.9, bad.worst_ratio = 3, worse.worst_ratio = 7;
  VerifyRow row;
  fold_checks(row, {{"a", ok}, {"b", near}});
  EXPECT_TRUE(row.pass);
  EXPECT_EQ(row.worst_tensor, "b");
  EXPECT_DOUBLE_EQ(row.margin, 1 - 0.9);
  fold_checks(row, {{"a", ok}, {"b", bad}, {"c", worse}});
  EXPECT_FALSE(row.pass);
  EXPECT_EQ(row.first_divergence, "b");
  EXPECT_EQ(row.worst_tensor, "c");
  LaunchCounts counted{"k"};
  counted.read[0] = 4096, counted.written[1] = 512;
  LaunchCounts other = counted;
  other.written[1] += 2;
  VerifyRow bytes;
  fold_checks(bytes, {{"a", ok}});
  check_against_sim(bytes, {counted}, {counted});
  EXPECT_TRUE(bytes.pass);
  EXPECT_NE(bytes.bytes.find("== sim"), std::string::npos) << bytes.bytes;
  check_against_sim(bytes, {other}, {counted});
  EXPECT_FALSE(bytes.pass);
  EXPECT_NE(bytes.bytes.find("!= sim"), std::string::npos) << bytes.bytes;
  EXPECT_NE(bytes.detail.find("differ from the simulator"), std::string::npos) << bytes.detail;
  // An exact check compares shapes too: the same values laid out [3, 2] are not a [2, 3] output.
  const Tensor<int32_t> want({2, 3}, {1, 2, 3, 4, 5, 6}), got({3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(exact_check("t", want, want).result.pass);
  EXPECT_EQ(exact_check("t", want, got).result.failure, "shape mismatch");
}

TEST(App, InfoNamesTheBackends) {
  const CliRun r = tandem({"info"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("emu available"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("best backend"), std::string::npos);
}

// `tandem verify --weights DIR --layer L`: the components that run on released tensors (the
// residual sites' hc_attn / hc_ffn, the router's ffn.gate) on a synthetic checkpoint in the
// release's layout, their rows at the release's widths; a bad checkpoint is exit 2 naming the
// tensor and the file.
void expect_checkpoint_rows(const std::vector<std::string>& args, const std::string& d,
                            const std::string& experts) {
  const CliRun r = tandem(args);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["pass"].get<bool>());
  std::multiset<std::string> components;
  for (const auto& c : j["cases"]) {
    const std::string name = c["case"], component = c["component"];
    components.insert(component);
    EXPECT_NE(name.find("layers.2"), std::string::npos) << name;
    const std::string width = component == "residual" ? "d=" + d
                              : component == "dense"  ? d + " -> " + experts
                                                      : "E=" + experts;
    EXPECT_NE(name.find(width), std::string::npos) << name;
    EXPECT_TRUE(c["schedules"].get<std::string>().starts_with("3 identical")) << c["schedules"];
  }
  EXPECT_EQ(components, (std::multiset<std::string>{"residual", "residual", "dense", "vision"}));
}

// `verify --layer 0 --component vision` on the checkpoint and release.json in `dir`: one passing
// gate row named `name`, its bytes the simulator's.
void expect_layer0_gate_row(const TestDir& dir, const std::string& name) {
  const CliRun r =
      tandem({"verify", "--json", "--backend", "emu", "--weights", dir.str(), "--release-file",
              (dir / "release.json").string(), "--layer", "0", "--component", "vision"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto rows = nlohmann::json::parse(r.out)["cases"];
  ASSERT_EQ(rows.size(), 1u) << r.out;
  EXPECT_NE(rows[0]["case"].get<std::string>().find(name), std::string::npos) << rows[0]["case"];
  EXPECT_TRUE(rows[0]["pass"].get<bool>()) << r.out;
  EXPECT_NE(rows[0]["bytes"].get<std::string>().find("== sim"), std::string::npos) << r.out;
}

TEST(App, VerifyRunsOnACheckpointLayersTensors) {
  const TestDir dir;
  const ReleaseConfig small = small_release();  // d = 64, 8 experts
  make_checkpoint(small, false).write(dir.path());
  nlohmann::json release = small_release_json();
  write_file_atomic(dir / "release.json", std::string_view(release.dump()));
  expect_checkpoint_rows({"verify", "--json", "--backend", "emu", "--weights", dir.str(),
                          "--release-file", (dir / "release.json").string(), "--layer", "2"},
                         "64", "8");
  // Layer 0 hashes (the small release's num_hash_layers 1): its gate row takes tid2eid's rows.
  ASSERT_NO_FATAL_FAILURE(expect_layer0_gate_row(dir, "layers.0.ffn.gate tid2eid/bias_vl T=2"));
  {  // V4's layout: no vision tower, so every token is text and hashes; no bias at all
    const TestDir v4;
    const nlohmann::json v4_release = small_v4_release_json();
    make_checkpoint(parse_release_config(JsonFields(v4_release, "v4")), false).write(v4.path());
    write_file_atomic(v4 / "release.json", std::string_view(v4_release.dump()));
    ASSERT_NO_FATAL_FAILURE(expect_layer0_gate_row(v4, "layers.0.ffn.gate tid2eid T=2"));
  }
  const CliRun missing = tandem({"verify", "--weights", dir.str(), "--release-file",
                                 (dir / "release.json").string(), "--layer", "3"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("tensor 'layers.3.hc_attn_fn' missing from weight_map"),
            std::string::npos)
      << missing.err;
  EXPECT_EQ(tandem({"verify", "--layer", "2"}).code, 2);  // --layer needs --weights
  const CliRun absent = tandem({"verify", "--weights", (dir / "nothing").string(), "--layer", "2"});
  EXPECT_EQ(absent.code, 2);
  EXPECT_NE(absent.err.find("model.safetensors.index.json: cannot open"), std::string::npos)
      << absent.err;
  const CliRun bad_release = tandem({"verify", "--weights", dir.str(), "--release-file",
                                     (dir / "nothing.json").string(), "--layer", "2"});
  EXPECT_EQ(bad_release.code, 2);
  EXPECT_NE(bad_release.err.find("nothing.json: cannot open"), std::string::npos)
      << bad_release.err;
  release["hidden"] = 60;  // not a multiple of 8
  write_file_atomic(dir / "release.json", std::string_view(release.dump()));
  const CliRun narrow = tandem({"verify", "--weights", dir.str(), "--release-file",
                                (dir / "release.json").string(), "--layer", "2"});
  EXPECT_EQ(narrow.code, 2);
  EXPECT_NE(narrow.err.find("release.json: field 'hidden'"), std::string::npos) << narrow.err;
  release["hidden"] = small.hidden;
  write_file_atomic(dir / "release.json", std::string_view(release.dump()));
  const CliRun none =  // nothing of kvcache runs on released weights
      tandem({"verify", "--weights", dir.str(), "--release-file", (dir / "release.json").string(),
              "--layer", "2", "--component", "kvcache"});
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("none of those runs on released weights"), std::string::npos) << none.err;
}

// At an Engram layer the Engram row runs on the layer's released tensors: the table rows its
// tokens read (only those are read from the shard: a release's table is ~98 GB), Wkv in its
// FP8 blocks, the gate vectors; a table missing from the shard is exit 2 naming it.
TEST(App, VerifyRunsEngramOnACheckpointLayersSampledTable) {
  const TestDir dir;
  const ReleaseConfig small = small_release();  // d = 64, tables of ~50-row primes
  Written w = make_checkpoint(small, true);
  w.write(dir.path());
  const nlohmann::json release = small_release_json();
  write_file_atomic(dir / "release.json", std::string_view(release.dump()));
  const std::vector<std::string> args = {"verify",         "--json",
                                         "--weights",      dir.str(),
                                         "--release-file", (dir / "release.json").string(),
                                         "--layer",        "1",
                                         "--tokens",       "6",
                                         "--component",    "engram"};
  const CliRun r = tandem(args);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["cases"].size(), 1u) << r.out;
  const auto& row = j["cases"][0];
  EXPECT_TRUE(j["pass"].get<bool>()) << r.out;
  const std::vector<int64_t> read = engram_checkpoint_rows(small, 1, 6, builtin_model("tiny").seed);
  EXPECT_GT(read.size(), 24u);
  EXPECT_LT(int64_t(read.size()), w.table_rows);
  EXPECT_NE(row["case"].get<std::string>().find(
                fmt::format("layers.1.engram ({} of {} rows)", read.size(), w.table_rows)),
            std::string::npos)
      << row["case"];
  EXPECT_NE(row["bytes"].get<std::string>().find("== sim"), std::string::npos) << row["bytes"];
  w.weight_map.erase("layers.1.engram.embed.scale");
  Written::write_index(dir.path(), w.weight_map);
  const CliRun missing = tandem(args);
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("layers.1.engram.embed.scale"), std::string::npos) << missing.err;
  // The other components at that layer do not read Engram's tensors.
  const CliRun residual =
      tandem({"verify", "--json", "--weights", dir.str(), "--release-file",
              (dir / "release.json").string(), "--layer", "1", "--component", "residual"});
  EXPECT_EQ(residual.code, 0) << residual.err;
}

// At V4.1-Flash's own widths (d = 5120, 384 experts): ~20 s under the emulator, so in the
// exhaustive tier (a RapidCheck budget above the quick tier's).
TEST(App, VerifyRunsOnACheckpointLayerAtTheReleasesWidths) {
  if (test::scaled_cases(1) < 2) GTEST_SKIP() << "release widths: the exhaustive tier";
  const TestDir dir;
  make_checkpoint(builtin_release("v4.1-flash"), false).write(dir.path());
  expect_checkpoint_rows({"verify", "--json", "--backend", "emu", "--weights", dir.str(), "--layer",
                          "2", "--tokens", "1"},
                         "5120", "384");
}

TEST(App, VerifyJsonPassesOnTheEmulator) {
  // Every component but the end-to-end model, whose row (a ~220-token prompt under four
  // schedules) is most of verify's time and runs in ci/test's own `tandem verify`; its kernels
  // run here through ModelEmu.* and golden's model case.
  std::vector<std::string> args = {"verify", "--json", "--backend", "emu"};
  for (const std::string& c : app::verify_components())
    if (c != "model") args.insert(args.end(), {"--component", c});
  const CliRun r = tandem(args);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["pass"].get<bool>());
  EXPECT_EQ(j["shared_memory_hazard_check"].get<bool>(), emu::hazard_check_built());
  EXPECT_EQ(j["not_run"], nlohmann::json::array());  // every component the tiny config holds ran
  // 20 rows (dspark's 5: verification and decode, greedy and sampled, and the sampled drafter;
  // dense's 3: the projection, the epilogue, the grouped output LoRA)
  // + kvcache: 6 formats, 3 windows, 6 compressors, 2 keys; + indexer: the config's logits and
  // top-k, 2 logits, 2 top-k rows, V4.1's candidates (a small row and one at the release's 2048
  // blocks of 8); + sparse_attn: V4.1, V4 and the config's attention, the attention's and the
  // indexer's query RoPE.
  EXPECT_EQ(j["cases"].size(), 20u + 17u + 8u + 5u);
  std::set<std::string> components;  // every component asked for has its rows
  for (const auto& c : j["cases"]) components.insert(c["component"].get<std::string>());
  EXPECT_EQ(components.size(), app::verify_components().size() - 1);
  EXPECT_EQ(components.count("dense"), 1u);
  EXPECT_EQ(components.count("kvcache"), 1u);
  EXPECT_EQ(components.count("indexer"), 1u);
  EXPECT_EQ(components.count("sparse_attn"), 1u);
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

// Rows run on --jobs host threads: the same rows, in the same order, with the same results (the
// JSON byte for byte) as one thread (the indexer's 8 rows: launches of several kernels from 3
// threads); --jobs outside [1, 64] is exit 2 naming it.
// Rows on 1 or 3 host threads, each launch's blocks on 1 or 4 (the indexer's top-k keeps its
// histogram in static __shared__ with shared-memory atomics; the residual's reductions stage
// partial sums there). Only each row's wall-clock "seconds" may differ.
TEST(App, VerifyRowsDoNotDependOnTheHostThreads) {
  std::vector<nlohmann::json> runs;
  for (const auto& [jobs, workers] : {std::pair{"1", "1"}, std::pair{"3", "4"}}) {
    const CliRun r =
        tandem({"verify", "--json", "--backend", "emu", "--jobs", jobs, "--block-workers", workers,
                "--component", "indexer", "--component", "residual"});
    ASSERT_EQ(r.code, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out);
    for (auto& c : j["cases"]) {
      EXPECT_GE(c["seconds"].get<double>(), 0.0);
      c.erase("seconds");
    }
    runs.push_back(std::move(j));
  }
  EXPECT_EQ(runs[0].dump(1), runs[1].dump(1));
  for (const char* flag : {"--jobs", "--block-workers"}) {
    const CliRun zero = tandem({"verify", flag, "0"});
    EXPECT_EQ(zero.code, 2);
    EXPECT_NE(zero.err.find(flag), std::string::npos) << zero.err;
  }
}

// verify's scheduler: a row that starts first (the end-to-end model's) is taken before the
// others, and every row comes out in job order whatever the workers.
TEST(App, RowsThatStartFirstAreTakenFirstAndComeOutInOrder) {
  for (int workers : {1, 3}) {
    std::mutex m;
    std::vector<std::string> taken;
    std::vector<app::ComponentJob> jobs;
    for (const char* name : {"a", "b", "long", "c"}) {
      VerifyJob j{name, [&, name] {
                    const std::lock_guard lock(m);
                    taken.push_back(name);
                    VerifyRow r;
                    r.component = "test", r.name = name;
                    return r;
                  }};
      j.starts_first = std::string(name) == "long";
      jobs.push_back({"test", std::move(j)});
    }
    const std::vector<VerifyRow> rows = app::run_jobs(jobs, {}, false, workers);
    std::vector<std::string> names;
    for (const VerifyRow& r : rows) names.push_back(r.name);
    EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "long", "c"})) << workers;
    ASSERT_EQ(taken.size(), 4u);
    if (workers == 1) EXPECT_EQ(taken, (std::vector<std::string>{"long", "a", "b", "c"}));
  }
}

TEST(App, VerifyTableHasVerdicts) {
  const CliRun r = tandem({"verify", "--backend", "emu", "--schedule", "reversed", "--component",
                           "residual", "--component", "moe"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("all cases PASS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("v41-single-pass/bf16"), std::string::npos);
  EXPECT_NE(r.out.find("moe "), std::string::npos);
  if (emu::hazard_check_built())
    EXPECT_NE(r.out.find("on emu, shared memory checked for races"), std::string::npos) << r.out;
  const CliRun unchecked =
      tandem({"verify", "--json", "--backend", "emu", "--no-hazard-check", "--component", "dense"});
  EXPECT_EQ(unchecked.code, 0) << unchecked.err;
  EXPECT_FALSE(nlohmann::json::parse(unchecked.out)["shared_memory_hazard_check"].get<bool>());
  emu::set_hazard_check(true);  // the flag is process-wide: on again for the tests after this one
  for (const char* other : {"engram ", "vision ", "dspark ", "model ", "attention "})
    EXPECT_EQ(r.out.find(std::string("\n") + other), std::string::npos) << other << r.out;
  const CliRun bad = tandem({"verify", "--component", "resdual"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--component"), std::string::npos) << bad.err;
}

TEST(App, BadInputExitsTwoNamingTheProblem) {
  const TestDir tmp;
  const auto bad_field = temp_file(
      tmp, "tandem_bad_cfg.json",
      R"({"name":"x","seed":1,"residual":{"hc_mult":4,"d":10,"sinkhorn_iters":20,"hc_eps":1e-6,"norm_eps":1e-6,"sites":2,"tokens":2},"engram":{},"vision":{}})");
  struct Case {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"verify", "--config", bad_field}, "residual.d"},
      {{"verify", "--config", "/nonexistent.json"}, "/nonexistent.json"},
      {{"verify", "--config", temp_file(tmp, "tandem_broken.json", "{")}, "invalid JSON"},
      {{"verify", "--model", "huge"}, "huge"},
      {{"verify", "--schedule", "sideways"}, "--schedule"},
      {{"verify", "--block-threads", "48"}, "--block-threads"},
      {{"verify", "--frobnicate"}, "frobnicate"},
      {{"verify", "--backend", "tpu"}, "--backend"},
      {{"golden", "check", "--dir", "/nonexistent"}, "/nonexistent"},
      {{"golden", "check", "--dir", kShipped, "no_such_case"}, "no_such_case"},
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
// The blob is always written under its shipped name inside `dir`; an edit may make the manifest
// name another (hostile) path, which only the product then reads.
struct GoldenCopy {
  fs::path dir;
  nlohmann::json manifest;
  std::string blob;       // the safetensors bytes
  std::string blob_name;  // the file they are written to, inside `dir`

  GoldenCopy(const TestDir& tmp, const std::string& name, const std::string& tag) : dir(tmp / tag) {
    fs::create_directories(dir);
    manifest = nlohmann::json::parse(read_file(fs::path(kShipped) / (name + ".json")));
    blob_name = manifest["blob"].get<std::string>();
    blob = read_file(fs::path(kShipped) / blob_name);
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
  // Manifest text to write instead of `manifest` (what nlohmann would refuse to build or print).
  std::function<std::string(const std::string& dumped)> raw;

  std::string write(bool keep_sha = false) {
    if (!keep_sha) manifest["blob_sha256"] = sha256_hex(blob);
    write_file_atomic(dir / blob_name, std::string_view(blob));
    const std::string text = manifest.dump(2);
    write_file_atomic(dir / (manifest["name"].get<std::string>() + ".json"),
                      std::string_view(raw ? raw(text) : text));
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
       {"dspark_verify_greedy.safetensors", "'p_target'", "nan"}},
      {"training_prompts",
       "dspark_drafter_training",
       [](GoldenCopy& g) { g.manifest["config"]["training"]["prompts"] = 0; },
       {"dspark_drafter_training.json", "config.training.prompts", "0"}},
      {"training_too_big",
       "dspark_drafter_training",
       [](GoldenCopy& g) {
         g.manifest["config"]["training"] = {
             {"prompts", 256}, {"prompt_tokens", 64}, {"steps", 256}, {"ridge", 1e-3}};
       },
       {"dspark_drafter_training.json", "training.prompts x steps x dspark.vocab"}},
      {"training_field",
       "dspark_drafter_training",
       [](GoldenCopy& g) { g.manifest["config"]["training"]["epochs"] = 3; },
       {"dspark_drafter_training.json", "epochs"}},
      {"last_token",
       "dspark_drafter",
       [](GoldenCopy& g) { g.edit_tensor<int32_t>("last", [](auto& t) { t.data[0] = -4; }); },
       {"dspark_drafter.", ".safetensors", "'last'", "-4"}},
      {"empty",
       "vision_100x40_f32",
       [](GoldenCopy& g) { g.manifest["config"]["vision"]["image_w"] = 0; },
       {"config.vision.image_w"}},
      {"huge",
       "residual_v4_bf16_d8",
       [](GoldenCopy& g) { g.manifest["config"]["residual"]["d"] = 1 << 20; },
       {"config.residual.d"}},
      {"huge_product",
       "residual_v4_bf16_d8",
       [](GoldenCopy& g) {
         g.manifest["config"]["residual"]["tokens"] = 1 << 20;
         g.manifest["config"]["residual"]["sites"] = 1024;
       },
       {"config.residual.tokens x sites x d", "working memory"}},
      {"drafter_decode_sizes",  // the case would train at its own sizes, which its budget skips
       "dspark_drafter",
       [](GoldenCopy& g) {
         g.manifest["config"]["dspark"]["backbone_width"] = 19368;
         g.manifest["config"]["dspark"]["decode"] = {
             {"width", 8}, {"backbone_width", 4}, {"markov_rank", 1}};
       },
       {"config.dspark.decode", "own sizes"}},
      {"blob_dotdot",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.manifest["blob"] = ".."; },
       {"field 'blob'", "'..'"}},
      {"blob_absolute",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.manifest["blob"] = "/etc/passwd"; },
       {"field 'blob'", "/etc/passwd"}},
      {"no_outputs",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.manifest["outputs"] = nlohmann::json::object(); },
       {"field 'outputs'", "compare nothing"}},
      {"invented_output",
       "dspark_verify_greedy",
       [](GoldenCopy& g) {
         g.manifest["outputs"]["warp_factor"] = {{"rule", "exact"}};
       },
       {"outputs.warp_factor", "no such output"}},
      {"config_contradicts_blob",
       "vision_100x40_f32",
       [](GoldenCopy& g) { g.manifest["config"]["vision"]["image_w"] = 200; },
       {"vision_100x40_f32.", ".safetensors", "'grid'"}},
      {"engram_tokens_contradict_blob",
       "engram_layer1_f32",
       [](GoldenCopy& g) { g.manifest["config"]["engram"]["tokens"] = 7; },
       {"engram_layer1_f32.", ".safetensors: tensor", "'ids'", "7"}},
      {"map_value",
       "engram_layer1_f32",
       [](GoldenCopy& g) { g.edit_tensor<int32_t>("map", [](auto& t) { t.data[5] = 3001; }); },
       {"engram_layer1_f32.", ".safetensors: map", "map[5] = 3001"}},
      {"features_empty",
       "dspark_drafter",
       [](GoldenCopy& g) {
         g.edit_tensor<double>("features", [](auto& t) { t = Tensor<double>({0, t.dim(1)}); });
       },
       {"dspark_drafter.", ".safetensors", "'features'", "0x"}},
      {"nan_input",
       "vision_100x40_f32",
       [](GoldenCopy& g) { g.edit_tensor<float>("grid", [](auto& t) { t.data[0] = NAN; }); },
       {"vision_100x40_f32.", ".safetensors", "'grid'", "nan"}},
      {"nan_expectation",
       "dspark_drafter",
       [](GoldenCopy& g) {
         g.edit_tensor<double>("expected.logits", [](auto& t) { t.data[0] = NAN; });
       },
       {"dspark_drafter.", ".safetensors", "'expected.logits'", "nan"}},
      {"inf_weight",
       "residual_v4_f32",
       [](GoldenCopy& g) {
         g.edit_tensor<float>("site0.fn", [](auto& t) { t.data[3] = -INFINITY; });
       },
       {"residual_v4_f32.safetensors", "'site0.fn'", "-inf"}},
      {"expectation_shape",
       "attention_f32_P24",
       [](GoldenCopy& g) {
         g.edit_tensor<double>("expected.o", [](auto& t) { t.shape = {t.size()}; });
       },
       {"attention_f32_P24.safetensors", "'expected.o'", "shape"}},
      {"expectation_reshaped",
       "moe_f32",
       [](GoldenCopy& g) {
         g.edit_tensor<double>("expected.f", [](auto& t) { t.shape = {t.dim(0), t.dim(1), 1}; });
       },
       {"moe_f32.", "'expected.f'", "shape"}},  // the blob's name carries its content hash
      {"sparse_index_past_cache",
       "sparse_attn_v41",
       [](GoldenCopy& g) { g.edit_tensor<int32_t>("comp_idx", [](auto& t) { t.data[3] = 7; }); },
       {"sparse_attn_v41.", ".safetensors", "'comp_idx'[0, 3] = 7"}},
      {"sparse_page_past_pool",
       "sparse_attn_v4",
       [](GoldenCopy& g) {
         g.edit_tensor<int32_t>("page_table", [](auto& t) { t.data[2] = 1000; });
       },
       {"sparse_attn_v4.", ".safetensors", "'page_table'[2] = 1000", "past the pool"}},
      {"output_unknown_field",
       "dspark_verify_greedy",
       [](GoldenCopy& g) { g.manifest["outputs"]["accepted"]["x"] = 1; },
       {"outputs.accepted.x", "unknown"}},
      {"is_image_value",
       "vision_100x40_f32",
       [](GoldenCopy& g) {
         g.edit_tensor<uint8_t>("gate.is_image", [](auto& t) { t.data[0] = 7; });
       },
       {"vision_100x40_f32.", ".safetensors", "gate.is_image", "7"}},
      {"nul_then_garbage",
       "dspark_verify_greedy",
       [](GoldenCopy& g) {
         g.raw = [](const std::string& text) { return text + std::string(1, '\0') + "{junk"; };
       },
       {"dspark_verify_greedy.json", "invalid JSON"}},
      {"nested_seed",
       "dspark_verify_greedy",
       [](GoldenCopy& g) {
         g.raw = [](const std::string& text) {
           return "{\"seed\": " + std::string(100000, '[') + std::string(100000, ']') + "," +
                  text.substr(1);
         };
       },
       {"dspark_verify_greedy.json", "nested deeper than"}},
      {"duplicate_key",
       "dspark_verify_greedy",
       [](GoldenCopy& g) {
         g.raw = [](const std::string& text) { return "{\"seed\": 1," + text.substr(1); };
       },
       {"dspark_verify_greedy.json", "'seed' appears twice"}},
  };
  const TestDir tmp;
  for (Case& c : cases) {
    GoldenCopy g(tmp, c.component, c.tag);
    c.edit(g);
    const std::string dir = g.write(std::string(c.tag) == "sha");
    const auto before = listing(dir);
    const CliRun r = tandem({"golden", "check", "--backend", "emu", "--dir", dir});
    EXPECT_EQ(r.code, 2) << c.tag << "\n" << r.out << r.err;
    for (const char* part : c.message)
      EXPECT_NE(r.err.find(part), std::string::npos) << c.tag << ": " << r.err;
    EXPECT_EQ(listing(dir), before) << c.tag;
    // regen over a broken case refuses to replace it (exit 1) and leaves no temporary file;
    // regen_one is the same for every component, and the DSpark drafter's generators (a training
    // step, scheduled decodes) take minutes under ASan, where this suite runs too: the other
    // components' cases check the refusal.
    if (std::string_view(c.component).starts_with("dspark_drafter")) continue;
    const std::string manifest_text =
        read_file(fs::path(dir) / (std::string(c.component) + ".json"));
    const CliRun regen = tandem({"golden", "regen", "--dir", dir, c.component});
    EXPECT_EQ(regen.code, 1) << c.tag << "\n" << regen.out;
    EXPECT_EQ(read_file(fs::path(dir) / (std::string(c.component) + ".json")), manifest_text);
    for (const auto& name : listing(dir)) EXPECT_EQ(name.find("tmp"), std::string::npos) << name;
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
  const TestDir tmp;
  for (const Case& c : cases) {
    const std::string path = temp_file(tmp, "tandem_cfg.json", c.config);
    const CliRun r = tandem({"verify", "--config", path});
    EXPECT_EQ(r.code, 2) << c.config << "\n" << r.err;
    for (const char* part : c.message)
      EXPECT_NE(r.err.find(part), std::string::npos) << c.config << ": " << r.err;
  }
  // traffic: flags out of range, and --out never leaves a partial report behind
  const fs::path out = tmp / "tandem_bad_traffic_out";
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
  const std::string file = temp_file(tmp, "tandem_not_a_dir", "x");
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
  const CliRun list = tandem({"golden", "list", "--dir", kShipped});
  EXPECT_EQ(list.code, 0);
  EXPECT_NE(list.out.find("residual_v41_bf16"), std::string::npos) << list.out;
  const CliRun check =
      tandem({"golden", "check", "--backend", "emu", "--dir", kShipped, "residual_v4_f32"});
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

// `tandem traffic --acceptance-from` takes what `tandem verify --json` measured in the DSpark
// decode rows (the sampled one) as the workload's per-position confidences, and says so.
TEST(App, TrafficTakesTheAcceptanceVerifyMeasured) {
  const TestDir dir;
  const CliRun v = tandem({"verify", "--json", "--component", "dspark"});
  ASSERT_EQ(v.code, 0) << v.err;
  const auto measured = nlohmann::json::parse(v.out);
  nlohmann::json sampled;
  for (const auto& c : measured["cases"])
    if (c["case"].get<std::string>().starts_with("decode/sampling")) sampled = c;
  ASSERT_TRUE(sampled.contains("acceptance_per_position")) << v.out;
  ASSERT_GT(sampled["tokens_per_pass"].get<double>(), 1.0);  // the trained drafter is accepted
  const std::string path = temp_file(dir, "verify.json", v.out);
  const CliRun r = tandem({"traffic", "--preset", "tiny", "--acceptance-from", path, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["workload"]["confidence"], sampled["acceptance_per_position"]);
  EXPECT_NE(j["workload"]["acceptance_from"].get<std::string>().find("decode/sampling"),
            std::string::npos);
  const CliRun table = tandem({"traffic", "--preset", "tiny", "--acceptance-from", path});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("measured in " + path), std::string::npos) << table.out;
}

// The acceptance file's success path on a small file of verify's JSON shape (the test above
// measures one; this one also runs in the quick tier's ASan pass): the sampled decode row's
// values are taken over the greedy one's, whatever their order.
TEST(App, TrafficTakesTheSampledDecodeRowsAcceptance) {
  const TestDir dir;
  const std::string path = temp_file(dir, "verify.json", R"({"cases": [
    {"case": "verify/greedy"},
    {"case": "decode/sampling T=1.0", "acceptance_per_position": [0.75, 0.5, 0.25]},
    {"case": "decode/greedy", "acceptance_per_position": [1, 1, 1]}]})");
  const CliRun r = tandem({"traffic", "--preset", "tiny", "--acceptance-from", path, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["workload"]["confidence"], nlohmann::json::parse("[0.75, 0.5, 0.25]"));
  EXPECT_NE(j["workload"]["acceptance_from"].get<std::string>().find("decode/sampling T=1.0"),
            std::string::npos);
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

// ---------------------------------------------------------------- hostile flags and files
// Each exits 2 with a message naming the flag, file or field and the value as typed, and leaves
// the working directory as it was.

// A config with every section of the built-in model, edited.
// A valid preset file's text (the shipped tiny preset).
std::string load_preset_json_text() {
  return read_file(fs::path(TANDEM_SOURCE_DIR) / "sim" / "presets" / "v4.1-flash-gh200.json");
}

std::string tiny_config_with(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = to_json(builtin_model("tiny"));
  edit(j);
  return j.dump();
}

// A config runs the components whose sections it holds: one asked for without its sections is
// bad input naming the section; without --component the others are listed as not run.
TEST(App, VerifyRunsTheComponentsWhoseSectionsTheConfigHolds) {
  const TestDir tmp;
  nlohmann::json j = nlohmann::json::parse(tiny_config_with([](auto&) {}));
  for (const char* s : {"engram", "vision", "dspark", "model"}) j.erase(s);
  const std::string path = temp_file(tmp, "residual_only.json", j.dump());
  CliRun r = tandem({"verify", "--config", path});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("not run, sections missing: engram, vision, attention, moe, dspark, model, "
                       "dense, indexer, sparse_attn"),
            std::string::npos)
      << r.out;
  for (const char* ran : {"residual ", "kvcache "})
    EXPECT_NE(r.out.find(std::string("\n") + ran), std::string::npos) << ran << r.out;
  r = tandem({"verify", "--config", path, "--component", "moe"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--component moe: " + path + " has no 'model' section"), std::string::npos)
      << r.err;
  j.erase("residual");
  r = tandem({"verify", "--config", temp_file(tmp, "none.json", j.dump())});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no component runs on its sections"), std::string::npos) << r.err;
  r = tandem({"verify", "--model", "v4.1-flash", "--component", "indexer"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("model v4.1-flash"), std::string::npos) << r.out;
}

// Each component reads its own sections: V4.1-Flash's config runs every component; with its
// sampled blocks standing for layers 0..3, the end-to-end model (Engram's layer 14 is none of
// them) is listed as not run with the reason unless asked for, and then is bad input naming the
// field. The components that join sections see them agree.
TEST(App, ComponentsWhoseSectionsAreRefusedAreNotRunUnlessAskedFor) {
  const app::ConfigComponents every =
      app::components_of_config(builtin_model_json("v4.1-flash"), "builtin:v4.1-flash", {});
  EXPECT_EQ(every.run.size(), app::verify_components().size());
  EXPECT_TRUE(every.refused.empty());
  nlohmann::json j = builtin_model_json("v4.1-flash");
  j["model"]["layers"] = {0, 1, 2, 3};
  const app::ConfigComponents c = app::components_of_config(j, "builtin:v4.1-flash", {});
  std::vector<std::string> ran, expected = app::verify_components();
  for (const auto& run : c.run) {
    ran.push_back(run.first);
    const auto& comp = *std::find_if(registry().begin(), registry().end(),
                                     [&](const Component& k) { return k.name == run.first; });
    EXPECT_EQ(std::set<std::string>(run.second.sections.begin(), run.second.sections.end()),
              std::set<std::string>(comp.sections.begin(), comp.sections.end()))
        << run.first;
  }
  std::erase(expected, "model");
  EXPECT_EQ(ran, expected);
  EXPECT_TRUE(c.missing_sections.empty());
  ASSERT_EQ(c.refused.size(), 1u);
  EXPECT_TRUE(c.refused[0].starts_with("model: ")) << c.refused[0];
  EXPECT_NE(c.refused[0].find("engram.layer_ids"), std::string::npos) << c.refused[0];
  try {
    app::components_of_config(j, "builtin:v4.1-flash", {"residual", "model"});
    FAIL() << "an asked-for component its sections refuse ran";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("engram.layer_ids"), std::string::npos) << e.what();
  }
  // A section bad on its own is bad input, asked for or not.
  const nlohmann::json bad_vision =
      nlohmann::json::parse(tiny_config_with([](auto& m) { m["vision"]["image_w"] = 0; }));
  try {
    app::components_of_config(bad_vision, "v.json", {});
    FAIL() << "a bad section was skipped";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("vision.image_w"), std::string::npos) << e.what();
  }
}

TEST(App, BadFlagsNameTheFlagAndTheValueAsTyped) {
  const TestDir tmp;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string tiny = tiny_config_with([](auto&) {});
  fs::create_directories(tmp / "a_directory");
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> message;
  } cases[] = {
      {{"verify", "--schedule", "shuffled:-1"}, {"--schedule", "shuffled:-1"}},
      {{"verify", "--schedule", "shuffled:"}, {"--schedule", "shuffled:"}},
      {{"verify", "--schedule", "shuffled: 5"}, {"--schedule", "shuffled: 5"}},
      {{"traffic", "--image", "4294967297x1"}, {"--image", "4294967297x1"}},
      {{"traffic", "--image", "99999999999x1"}, {"--image", "99999999999x1"}},
      {{"traffic", "--image", "-5x3"}, {"--image", "-5x3"}},
      {{"traffic", "--image", "5x"}, {"--image", "5x"}},
      {{"traffic", "--confidence", ""}, {"--confidence", "''"}},
      {{"traffic", "--confidence", "0.5,,0.2"}, {"--confidence", "0.5,,0.2"}},
      {{"traffic", "--confidence", "0.5,x"}, {"--confidence", "'x'"}},
      {{"traffic", "--acceptance-from", temp_file(tmp, "no_cases.json", R"({"model":"tiny"})")},
       {"no_cases.json", "'cases'"}},
      {{"traffic", "--acceptance-from",
        temp_file(tmp, "no_decode.json", R"({"cases":[{"case":"verify/greedy"}]})")},
       {"no_decode.json", "acceptance_per_position"}},
      {{"traffic", "--acceptance-from",
        temp_file(tmp, "over_one.json",
                  R"({"cases":[{"case":"decode/greedy","acceptance_per_position":[0.5,1.5]}]})")},
       {"over_one.json", "cases[0].acceptance_per_position'[1]", "1.5"}},
      {{"traffic", "--acceptance-from",
        temp_file(tmp, "empty_profile.json",
                  R"({"cases":[{"case":"decode/greedy","acceptance_per_position":[]}]})")},
       {"empty_profile.json", "1 to 8 values"}},
      {{"traffic", "--acceptance-from",
        temp_file(tmp, "escape_case.json",
                  "{\"cases\":[{\"case\":\"decode/\\u001b[2Jgreedy\",\"acceptance_per_"
                  "position\":[0.5]}]}")},
       {"escape_case.json", "cases[0].case'", "control character", "decode/\\x1b[2Jgreedy"}},
      {{"traffic", "--preset-file", temp_file(tmp, "escape_name.json", R"({"name":"p\u009b31m"})")},
       {"escape_name.json", "field 'name'", "control character", "p\\xc2\\x9b31m"}},
      {{"traffic", "--acceptance-from", temp_file(tmp, "array.json", "[1,2]")},
       {"array.json", "tandem verify --json"}},
      {{"traffic", "--acceptance-from", ""}, {"--acceptance-from", "empty"}},
      {{"traffic", "--acceptance-from", "missing.json", "--confidence", "0.5"},
       {"--confidence", "--acceptance-from"}},
      {{"traffic", "--preset", "tiny", "--preset-file", "p.json"}, {"--preset", "--preset-file"}},
      {{"traffic", "--preset-file", ""}, {"--preset-file", "empty"}},
      {{"traffic", "--preset-file", "/dev/zero"}, {"/dev/zero", "not a regular file"}},
      {{"traffic", "--preset-file", (tmp / "a_directory").string()},
       {"a_directory", "is a directory"}},
      {{"traffic", "--preset-file",
        temp_file(tmp, "deep_gamma.json", R"({"name":"p","gamma":)" + deep + "}")},
       {"deep_gamma.json", "nested deeper than"}},
      {{"verify", "--model", "tiny", "--config", "c.json"}, {"--model", "--config"}},
      {{"verify", "--config", ""}, {"--config", "empty"}},
      {{"verify", "--config", "/dev/zero"}, {"/dev/zero", "not a regular file"}},
      {{"verify", "--config", (tmp / "a_directory").string()}, {"a_directory", "is a directory"}},
      {{"verify", "--config",
        temp_file(tmp, "deep_tokens.json", tiny_config_with([](auto& j) {
                                             j["residual"]["tokens"] = 0;
                                           }).replace(0, 1, "{\"name\":" + deep + ","))},
       {"deep_tokens.json", "nested deeper than"}},
      {{"verify", "--config", temp_file(tmp, "dup.json", "{\"seed\":1," + tiny.substr(1))},
       {"dup.json", "'seed' appears twice"}},
      {{"verify", "--config",
        temp_file(tmp, "dup_nested.json",
                  tiny_config_with([](auto&) {}).replace(tiny.find("\"d\":"), 0, "\"d\":8,"))},
       {"dup_nested.json", "'engram.d' appears twice"}},
      {{"traffic", "--batch", "010"}, {"--batch", "'010'"}},
      {{"traffic", "--batch", "0x10"}, {"--batch", "'0x10'"}},
      {{"traffic", "--context", "99999999999999999999"}, {"--context", "99999999999999999999"}},
      {{"traffic", "--acceptance", ""}, {"--acceptance", "''"}},
      {{"verify", "--block-threads", "0128"}, {"--block-threads", "'0128'"}},
      {{"verify", "--config",
        temp_file(tmp, "nul.json", tiny + std::string(1, '\0') + R"({"residual": junk)")},
       {"nul.json", "invalid JSON"}},
      {{"bogus"}, {"unknown command", "bogus"}},
      {{"golden", "chek"}, {"unknown command", "chek"}},
      {{"golden", "check", "--dir", kShipped, "residual_v4_f32", "residul_v4_f32"},
       {"residul_v4_f32"}},
  };
  for (const auto& c : cases) {
    const auto before = listing(tmp.path());
    const CliRun r = tandem(c.args);
    EXPECT_EQ(r.code, 2) << c.args[0] << " " << c.message[0] << "\n" << r.out << r.err;
    for (const auto& part : c.message)
      EXPECT_NE(r.err.find(part), std::string::npos) << part << " in: " << r.err;
    EXPECT_LT(r.err.size(), 2000u) << "the message repeats what it was sent";
    EXPECT_EQ(listing(tmp.path()), before);
  }
}

// Sizes that pass each field's range but multiply into terabytes or hours are refused before
// anything is allocated, naming the fields.
TEST(App, ConfigsClaimingTerabytesOrHoursAreRefused) {
  const TestDir tmp;
  using Edit = std::function<void(nlohmann::json&)>;
  // Each with the component that reads the section(s) (a section is validated when read).
  const std::tuple<Edit, std::string, std::vector<std::string>> cases[] = {
      {[](auto& j) {
         j["residual"]["d"] = 12288, j["residual"]["sites"] = 1024,
         j["residual"]["tokens"] = 1 << 20;
       },
       "residual",
       {"residual.tokens x sites x d"}},
      {[](auto& j) { j["vision"]["image_w"] = 1 << 20, j["vision"]["image_h"] = 1 << 20; },
       "vision",
       {"vision.image_w x image_h"}},
      {[](auto& j) { j["dspark"]["vocab"] = 1 << 20, j["dspark"]["requests"] = 1 << 16; },
       "dspark",
       {"dspark.requests x gamma x vocab"}},
      {[](auto& j) { j["engram"]["tokens"] = 1 << 20; }, "engram", {"engram.tokens x layer_ids"}},
      {[](auto& j) { j["engram"]["table_base"] = int64_t{1} << 40; },
       "engram",
       {"engram.table_base"}},
      {[](auto& j) { j["engram"]["layer_ids"] = std::vector<int>(1000, 1); },
       "engram",
       {"engram.layer_ids", "1000 layer ids"}},
      {[](auto& j) { j["model"]["prompt_tokens"] = 65536; }, "model", {"model.prompt_tokens"}},
      {[](auto& j) {
         j["vision"]["experts"] = 256, j["vision"]["top_k"] = 16, j["model"]["ffn_hidden"] = 16384;
         j["residual"]["d"] = 1024;  // 128 routed experts of 2 x 16384 x 1024
       },
       "moe",
       {"vision.experts x model.ffn_hidden"}},
      {[](auto& j) {
         j["residual"]["tokens"] = 60000, j["residual"]["sites"] = 1;
         j["vision"]["top_k"] = 16, j["model"]["ffn_hidden"] = 8192;
       },
       "moe",
       {"residual.tokens x vision.top_k"}},
  };
  for (const auto& [edit, component, message] : cases) {
    const std::string path = temp_file(tmp, "big.json", tiny_config_with(edit));
    const CliRun r = tandem({"verify", "--config", path, "--component", component});
    EXPECT_EQ(r.code, 2) << message[0] << "\n" << r.err;
    for (const auto& part : message)
      EXPECT_NE(r.err.find(part), std::string::npos) << part << " in: " << r.err;
  }
}

// Output paths and preset names reach gnuplot as data, never as commands: quotes, backquotes,
// $(), newlines and non-ASCII in --out and in a preset's name simply work.
TEST(App, TrafficOutputPathsAndPresetNamesRunNothing) {
  const TestDir tmp;
  // A command that ran would leave a file PWNED*: the preset name touches absolute paths in tmp;
  // an output name cannot hold a '/', so its touches are relative (to the working directory of
  // whatever ran them: this process's, or gnuplot's, which is inside the output directory).
  const std::string marker = (tmp / "PWNED").string();
  nlohmann::json preset = nlohmann::json::parse(load_preset_json_text());
  preset["name"] = "`touch " + marker + "1` $(touch " + marker + "2) 'q' \"dq\" \\ @x";
  const std::string preset_file = temp_file(tmp, "hostile.json", preset.dump());
  for (const std::string out :
       {"DIR'; touch PWNED3; '", "bob's results", "caf\xc3\xa9\n$(touch PWNED4)`touch PWNED5`"}) {
    const fs::path dir = tmp / out;
    const CliRun r = tandem({"traffic", "--preset-file", preset_file, "--out", dir.string()});
    ASSERT_EQ(r.code, 0) << out << "\n" << r.err;
    for (const char* f : sim::kReportFiles) EXPECT_TRUE(fs::exists(dir / f)) << out << " " << f;
    const CliRun j =
        tandem({"traffic", "--preset-file", preset_file, "--out", dir.string(), "--json"});
    ASSERT_EQ(j.code, 0) << j.err;
    EXPECT_EQ(nlohmann::json::parse(j.out)["preset"], preset["name"]);  // stdout: JSON only
  }
  // Relative touches would land in the process's or gnuplot's working directory.
  for (const fs::path& where : {tmp.path(), fs::current_path()})
    for (const auto& e : fs::recursive_directory_iterator(where))
      EXPECT_FALSE(e.path().filename().string().starts_with("PWNED")) << "ran: " << e.path();
}

// An output name taken by a directory: refused before anything is moved or printed.
TEST(App, TrafficOutputBlockedByADirectoryChangesNothing) {
  const TestDir tmp;
  const fs::path out = tmp / "out";
  fs::create_directories(out / "sweep.csv" / "x");
  const auto before = listing(out);
  const CliRun r = tandem({"traffic", "--preset", "tiny", "--out", out.string()});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("sweep.csv"), std::string::npos) << r.err;
  EXPECT_EQ(listing(out), before);
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// A report nobody received is a failure (stdout on a full disk, a closed pipe).
TEST(App, UnwritableOutputIsAnError) {
  struct Full : std::streambuf {
    int overflow(int) override { return traits_type::eof(); }
    std::streamsize xsputn(const char*, std::streamsize) override { return 0; }
  } full;
  std::ostream out(&full);
  std::ostringstream err;
  const char* argv[] = {"tandem", "traffic", "--json"};
  EXPECT_EQ(app::run(3, argv, out, err), 2);
  EXPECT_NE(err.str().find("cannot write the output"), std::string::npos) << err.str();
}

// A kernel's unusable output fails its own row (exit 1 once folded), naming the tensor; the
// rows after it still run. Bad input stays bad input.
TEST(App, KernelFaultFailsItsRowAndTheRunGoesOn) {
  const RunOptions opt{Backend::emu, {}, 128};
  const app::VerifyRow bad = app::run_row("dspark", "decode", opt, []() -> app::VerifyRow {
    throw KernelFault("emitted", "verifier: emitted[0, 0] = -1, outside [0, 257)");
  });
  EXPECT_FALSE(bad.pass);
  EXPECT_EQ(bad.first_divergence, "emitted");
  EXPECT_NE(bad.detail.find("-1"), std::string::npos);
  const auto j = app::to_json({bad}, "tiny");
  EXPECT_FALSE(j["pass"].get<bool>());
  EXPECT_NE(app::render_table({bad}).find("FAIL (first divergence: emitted)"), std::string::npos);
  EXPECT_THROW(app::run_row("dspark", "decode", opt,
                            []() -> app::VerifyRow { throw BadInput("config: bad"); }),
               BadInput);
}

}  // namespace
}  // namespace tandem
