// golden/: the shipped cases pass; regen is atomic, reports deltas and refuses changed
// expectations without --accept; corrupt files are BadInput naming the file and field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/safetensors.hpp"
#include "golden/golden.hpp"

namespace tandem {
namespace fs = std::filesystem;
namespace {

const fs::path kShipped = fs::path(TANDEM_SOURCE_DIR) / "golden" / "cases";

class GoldenDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tandem_golden_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

void expect_bad_input(const fs::path& manifest, std::initializer_list<const char*> parts) {
  try {
    golden::check_case(manifest, {});
    FAIL() << "accepted " << manifest;
  } catch (const BadInput& e) {
    for (const char* p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
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
  const fs::path copy = fs::temp_directory_path() / "tandem_golden_copy";
  fs::remove_all(copy);
  fs::copy(kShipped, copy);
  for (const auto& r : golden::regen_cases(copy, false)) {
    EXPECT_FALSE(r.changed) << r.name;
    EXPECT_FALSE(r.written) << r.name;
  }
  fs::remove_all(copy);
}

TEST_F(GoldenDir, RegenWritesThenRefusesChangedExpectationsWithoutAccept) {
  for (const auto& r : golden::regen_cases(dir_, false)) EXPECT_TRUE(r.written) << r.name;
  const auto names = golden::generator_case_names();
  // Corrupt one expectation by editing the blob and fixing up the manifest's SHA-256.
  const fs::path manifest = dir_ / (names[0] + ".json");
  const fs::path blob = dir_ / (names[0] + ".safetensors");
  Safetensors st = read_safetensors(blob);
  auto y = st.get_as<double>("expected.y_out", blob.string());
  y.data[0] += 1.0;
  st.put("expected.y_out", y);
  write_safetensors(blob, st);
  auto j = nlohmann::json::parse(read_file(manifest));
  j["blob_sha256"] = sha256_hex(read_file(blob));
  write_file_atomic(manifest, std::string_view(j.dump()));
  EXPECT_FALSE(golden::check_case(manifest, {}).pass());

  const std::string before = read_file(blob);
  const auto refused = golden::regen_cases(dir_, false);
  EXPECT_TRUE(refused[0].changed);
  EXPECT_FALSE(refused[0].written);
  EXPECT_EQ(read_file(blob), before);
  bool reported = false;
  for (const auto& d : refused[0].deltas)
    reported |= d.find("y_out") != std::string::npos && d.find("CHANGED") != std::string::npos;
  EXPECT_TRUE(reported);

  const auto accepted = golden::regen_cases(dir_, true);
  EXPECT_TRUE(accepted[0].written);
  EXPECT_TRUE(golden::check_case(manifest, {}).pass());
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "left behind: " << e.path();
}

TEST_F(GoldenDir, CorruptFilesAreBadInputNamingFileAndField) {
  golden::regen_cases(dir_, false);
  const std::string name = golden::generator_case_names()[1];
  const fs::path manifest = dir_ / (name + ".json");
  const fs::path blob = dir_ / (name + ".safetensors");
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
  with([](auto& j) { j["blob"] = "../elsewhere.safetensors"; });
  expect_bad_input(manifest, {"blob"});
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

TEST(Golden, MissingDirectoryIsBadInput) {
  EXPECT_THROW(golden::list_cases("/nonexistent/cases"), BadInput);
}

}  // namespace
}  // namespace tandem
