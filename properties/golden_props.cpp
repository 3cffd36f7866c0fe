// golden/: the registry's components are CMake's; the shipped cases pass; regen is atomic, reports
// deltas and refuses changed expectations without --accept; corrupt files are BadInput naming the
// file and field.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "cases/case.hpp"
#include "cases/case_check.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/safetensors.hpp"
#include "golden/golden.hpp"
#include "tandem_components.hpp"  // TANDEM_CMAKE_COMPONENTS, generated from CMakeLists.txt
#include "test_dir.hpp"

namespace tandem {
namespace fs = std::filesystem;
namespace {

const fs::path kShipped = fs::path(TANDEM_SOURCE_DIR) / "golden" / "cases";

class GoldenDir : public ::testing::Test {
 protected:
  TestDir tmp_;
  const fs::path dir_ = tmp_.path();
};

// The blob a case's manifest names.
fs::path blob_of(const fs::path& manifest) {
  return manifest.parent_path() /
         nlohmann::json::parse(read_file(manifest))["blob"].get<std::string>();
}

// The entries of `dir` (names, sorted).
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

void expect_bad_input(const fs::path& manifest, std::initializer_list<const char*> parts) {
  try {
    golden::check_case(manifest, {});
    FAIL() << "accepted " << manifest;
  } catch (const BadInput& e) {
    for (const char* p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

// The registry (cases/registry.cpp) and CMakeLists.txt's tandem_component() calls name the same
// components: registry.cpp does not compile otherwise, and here each component's name (what
// manifests, `--component` and verify rows use) is its stem, once.
TEST(Registry, ComponentsAreCMakesComponentsByStem) {
#define TANDEM_STEM_NAME(stem) #stem,
  std::vector<std::string> stems{TANDEM_CMAKE_COMPONENTS(TANDEM_STEM_NAME)};
#undef TANDEM_STEM_NAME
  std::vector<std::string> names;
  for (const Component& c : registry()) names.push_back(c.name);
  std::sort(stems.begin(), stems.end());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end()) << "a name twice";
  EXPECT_EQ(names, stems) << "registry() names vs CMakeLists.txt's tandem_component() stems";
  for (const std::string& stem : stems) EXPECT_NE(find_component(stem), nullptr) << stem;
}

TEST(Golden, ShippedCasesPassOnTheEmulator) {
  const auto cases = golden::list_cases(kShipped);
  ASSERT_GE(cases.size(), 3u);
  for (const auto& c : cases) {
    const auto r = golden::check_case(c, {Backend::emu, {}, 128});
    EXPECT_TRUE(r.pass()) << r.name;
    for (const auto& t : r.tensors)
      EXPECT_TRUE(t.pass) << r.name << " " << t.name << ": " << t.detail;
  }
}

TEST(Golden, ShippedCasesAreWhatTheGeneratorWrites) {
  // Regenerating into a copy changes nothing (the checked-in files are current).
  const TestDir tmp;
  const fs::path copy = tmp / "cases";
  fs::copy(kShipped, copy);
  for (const auto& r : golden::regen_cases(copy, false)) {
    EXPECT_FALSE(r.changed) << r.name;
    EXPECT_FALSE(r.written) << r.name;
  }
}

TEST_F(GoldenDir, RegenWritesThenRefusesChangedExpectationsWithoutAccept) {
  // Two cases: writing every one is Golden.ShippedCasesAreWhatTheGeneratorWrites' (the default
  // build), and this suite also runs under ASan, where the drafter's and the model's generators
  // take minutes.
  const auto names = golden::generator_case_names();
  const auto written = golden::regen_cases(dir_, false, {names[0], names[1]});
  ASSERT_EQ(written.size(), 2u);
  for (const auto& r : written) EXPECT_TRUE(r.written) << r.name;
  // Corrupt one expectation by editing the blob and fixing up the manifest's SHA-256.
  const fs::path manifest = dir_ / (names[0] + ".json");
  const fs::path blob = blob_of(manifest);
  Safetensors st = read_safetensors(blob);
  auto y = st.get_as<double>("expected.y_out", blob.string());
  y.data[0] += 1.0;
  st.put("expected.y_out", y);
  write_safetensors(blob, st);
  auto j = nlohmann::json::parse(read_file(manifest));
  j["blob_sha256"] = sha256_hex(read_file(blob));
  write_file_atomic(manifest, std::string_view(j.dump()));
  EXPECT_FALSE(golden::check_case(manifest, {}).pass());

  // The refusal and the acceptance regenerate the corrupted case only (every case was written
  // above; `only` runs one case's generator, as `tandem golden regen NAME` does).
  const std::string before = read_file(blob);
  const auto refused = golden::regen_cases(dir_, false, {names[0]});
  EXPECT_TRUE(refused[0].changed);
  EXPECT_FALSE(refused[0].written);
  EXPECT_EQ(read_file(blob), before);
  bool reported = false;
  for (const auto& d : refused[0].deltas)
    reported |= d.find("y_out") != std::string::npos && d.find("CHANGED") != std::string::npos;
  EXPECT_TRUE(reported);

  const auto accepted = golden::regen_cases(dir_, true, {names[0]});
  EXPECT_TRUE(accepted[0].written);
  EXPECT_TRUE(golden::check_case(manifest, {}).pass());
  // Nothing else left behind: one blob per case (the one its manifest names), no temporaries.
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string f = e.path().filename().string();
    EXPECT_EQ(f.find("tmp"), std::string::npos) << "left behind: " << f;
    if (f.starts_with(names[0] + ".") && f.ends_with(".safetensors")) {
      EXPECT_EQ(e.path(), blob_of(manifest)) << "left behind: " << f;
    }
  }
}

TEST_F(GoldenDir, CorruptFilesAreBadInputNamingFileAndField) {
  const std::string name = golden::generator_case_names()[1];
  golden::regen_cases(dir_, false, {name});
  const fs::path manifest = dir_ / (name + ".json");
  const fs::path blob = blob_of(manifest);
  const auto original = nlohmann::json::parse(read_file(manifest));
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    auto j = original;
    edit(j);
    write_file_atomic(manifest, std::string_view(j.dump()));
  };
  with([](auto& j) { j["format_version"] = 99; });
  expect_bad_input(manifest, {name.c_str(), "format_version"});
  with([](auto& j) { j["config"]["residual"]["d"] = 7; });
  expect_bad_input(manifest, {"config.residual.d"});
  with([](auto& j) { j.erase("seed"); });
  expect_bad_input(manifest, {"seed", "missing"});
  with([](auto& j) { j["blob_sha256"] = std::string(64, '0'); });
  expect_bad_input(manifest, {"blob_sha256", "SHA-256"});
  with([](auto& j) { j["outputs"]["y_out"]["rule"] = "close-enough"; });
  expect_bad_input(manifest, {"outputs.y_out", "rule"});
  for (const char* hostile : {"../elsewhere.safetensors", "..", ".", "/etc/passwd", ""}) {
    with([&](auto& j) { j["blob"] = hostile; });
    expect_bad_input(manifest, {"blob"});
  }
  with([](auto& j) { j["outputs"] = nlohmann::json::object(); });
  expect_bad_input(manifest, {"outputs", "compare nothing"});
  write_file_atomic(manifest, std::string_view("{\"format_version\": 1,"));
  expect_bad_input(manifest, {name.c_str(), "invalid JSON"});

  // Truncated blob whose manifest agrees with it: the safetensors parser names the blob.
  const std::string bytes = read_file(blob);
  write_file_atomic(blob, std::string_view(bytes.substr(0, bytes.size() / 2)));
  with([&](auto& j) { j["blob_sha256"] = sha256_hex(read_file(blob)); });
  expect_bad_input(manifest, {blob.string().c_str()});
  fs::remove(blob);
  expect_bad_input(manifest, {blob.string().c_str(), "cannot open"});
}

// The reference check's delta: equal infinities are no difference (sparse_attn's +inf lse), any
// other infinity or NaN an infinite one, and an infinity never widens the 1e-12 scale.
TEST(Golden, DeltaCountsOnlyEqualInfinitiesAsEqual) {
  EXPECT_TRUE(delta({INFINITY, 2.0}, {INFINITY, 2.0}).within());
  EXPECT_TRUE(delta({-INFINITY, 0.0}, {-INFINITY, 0.0}).within());
  EXPECT_FALSE(delta({INFINITY, 2.0}, {-INFINITY, 2.0}).within());
  EXPECT_FALSE(delta({INFINITY, 2.0}, {1e300, 2.0}).within());
  EXPECT_FALSE(delta({1e300, 2.0}, {INFINITY, 2.0}).within());
  EXPECT_FALSE(delta({NAN, 2.0}, {NAN, 2.0}).within());
  EXPECT_FALSE(delta({INFINITY, 2.1}, {INFINITY, 2.0}).within());  // the scale is 2, not inf
  EXPECT_TRUE(delta({INFINITY, 2.0 + 1e-13}, {INFINITY, 2.0}).within());
  // The bound: 1e-12 of the largest finite stored magnitude (2 here), no more.
  EXPECT_TRUE(delta({-1.0, 2.0 + 1.9e-12}, {-1.0, 2.0}).within());
  EXPECT_FALSE(delta({-1.0, 2.0 + 2.1e-12}, {-1.0, 2.0}).within());
  EXPECT_FALSE(delta({-1.0 + 2.1e-12, 2.0}, {-1.0, 2.0}).within());
}

TEST(Golden, MissingDirectoryIsBadInput) {
  EXPECT_THROW(golden::list_cases("/nonexistent/cases"), BadInput);
}

// Symlinks leading out of the case directory are refused for reading (check) and writing
// (regen); the file they point at is never read or written.
TEST_F(GoldenDir, SymlinksLeadingOutAreRefused) {
  const std::string name = golden::generator_case_names()[0];
  golden::regen_cases(dir_, false, {name});
  const fs::path manifest = dir_ / (name + ".json"), blob = blob_of(manifest);
  const fs::path outside = dir_.parent_path() / (dir_.filename().string() + "-outside");
  fs::create_directories(outside);
  const std::string secret = "not a golden file\n";
  write_file_atomic(outside / "secret", std::string_view(secret));
  struct Restore {  // the sibling is the test's too
    fs::path p;
    ~Restore() { fs::remove_all(p); }
  } restore{outside};

  // The blob is a symlink to a file outside: check refuses.
  const std::string bytes = read_file(blob);
  fs::remove(blob);
  fs::create_symlink(outside / "secret", blob);
  expect_bad_input(manifest, {"blob", "outside the case directory"});
  // regen --accept refuses to write through it, and the outside file is untouched.
  fs::remove(blob);
  write_file_atomic(blob, std::string_view(bytes));
  const fs::path copy_manifest = outside / (name + ".json");
  fs::rename(manifest, copy_manifest);
  fs::create_symlink(copy_manifest, manifest);
  const std::string outside_manifest = read_file(copy_manifest);
  EXPECT_THROW(golden::regen_cases(dir_, true, {name}), BadInput);
  EXPECT_EQ(read_file(copy_manifest), outside_manifest);
  EXPECT_THROW(golden::check_case(manifest, {}), BadInput);
  EXPECT_EQ(read_file(outside / "secret"), secret);
  // A symlink inside the directory to a file inside it is fine.
  fs::remove(manifest);
  fs::rename(copy_manifest, dir_ / "real.json.txt");
  fs::create_symlink("real.json.txt", manifest);
  EXPECT_TRUE(golden::check_case(manifest, {}).pass());
}

// A regen that refuses one of its paths writes nothing: the shared files (Engram's synthetic map)
// and the other cases are written only after every path it may write was checked.
TEST_F(GoldenDir, ARefusedRegenWritesNothing) {
  const std::vector<std::string> names = golden::generator_case_names();
  const fs::path outside = dir_.parent_path() / (dir_.filename().string() + "-outside.json");
  struct Restore {  // the sibling is the test's too
    fs::path p;
    ~Restore() { fs::remove(p); }
  } restore{outside};
  const std::string outside_bytes = "{}";
  write_file_atomic(outside, std::string_view(outside_bytes));
  fs::create_symlink(outside, dir_ / (names.back() + ".json"));
  EXPECT_THROW(golden::regen_cases(dir_, true, {names.front(), names.back()}), BadInput);
  EXPECT_THROW(golden::regen_cases(dir_, true), BadInput);
  EXPECT_EQ(entries(dir_), std::vector<std::string>{names.back() + ".json"});
  EXPECT_EQ(read_file(outside), outside_bytes);
}

// What killed regens leave (temporaries of dead processes, blobs no manifest names) is removed
// by the next regen; blobs a manifest names and other files stay.
TEST_F(GoldenDir, RegenRemovesLeftoversOfKilledRuns) {
  const std::string name = golden::generator_case_names()[0];
  golden::regen_cases(dir_, false, {name});
  const auto before = entries(dir_);
  write_file_atomic(dir_ / (name + ".0123456789abcdef.safetensors"), std::string_view("x"));
  write_file_atomic(dir_ / (name + ".safetensors"), std::string_view("old-style orphan"));
  write_file_atomic(dir_ / (name + ".json.tandem-tmp.999999999.0badc0de"), std::string_view("{"));
  write_file_atomic(dir_ / "notes.safetensors", std::string_view("not a case's"));
  golden::regen_cases(dir_, false, {name});
  auto expected = before;
  expected.push_back("notes.safetensors");
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(entries(dir_), expected);
}

// A manifest naming another file as its blob never gets that file removed by regen, and a regen
// whose manifest cannot be written takes its new blob back.
TEST_F(GoldenDir, RegenRemovesOnlyTheCasesOwnBlobs) {
  const auto names = golden::generator_case_names();
  golden::regen_cases(dir_, false, {names[0], names[1]});
  const fs::path victim = dir_ / (names[1] + ".json");
  const std::string victim_text = read_file(victim);
  auto j = nlohmann::json::parse(read_file(dir_ / (names[0] + ".json")));
  j["blob"] = names[1] + ".json";
  write_file_atomic(dir_ / (names[0] + ".json"), std::string_view(j.dump()));
  const auto r = golden::regen_cases(dir_, true, {names[0]});
  EXPECT_TRUE(r[0].written);
  EXPECT_EQ(read_file(victim), victim_text);
  EXPECT_TRUE(golden::check_case(dir_ / (names[0] + ".json"), {}).pass());

  fs::remove(dir_ / (names[0] + ".json"));
  fs::remove(blob_of(victim));  // so the rewritten blob would be new
  fs::create_directories(dir_ / (names[0] + ".json"));
  const auto before = entries(dir_);
  EXPECT_THROW(golden::regen_cases(dir_, true, {names[0]}), BadInput);
  EXPECT_EQ(entries(dir_), before);
}

TEST_F(GoldenDir, FifoAndDirectoryManifestsAreBadInputNotHangs) {
  ASSERT_EQ(::mkfifo((dir_ / "fifo_case.json").c_str(), 0600), 0);
  expect_bad_input(dir_ / "fifo_case.json", {"fifo_case.json", "not a regular file"});
  fs::create_directories(dir_ / "dir_case.json");
  expect_bad_input(dir_ / "dir_case.json", {"dir_case.json", "is a directory"});
}

TEST_F(GoldenDir, UnreadableDirectoryIsBadInput) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads any directory; needs an unprivileged user";
  fs::permissions(dir_, fs::perms::none);
  EXPECT_THROW(golden::list_cases(dir_), BadInput);
  fs::permissions(dir_, fs::perms::owner_all);
}

}  // namespace
}  // namespace tandem
