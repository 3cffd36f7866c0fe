#pragma once
// Test helper: a directory of this test's own, "<tmp>/tandem-<test name>.XXXXXX" made by
// mkdtemp(3), removed with its contents when the test ends. Tests write only inside it, so two
// suites running at once never meet, and nothing a test builds can point elsewhere.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace tandem {

class TestDir {
 public:
  TestDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "test";
    for (char& c : name)
      if (c == '/') c = '_';  // parameterised test names
    std::string pattern =
        (std::filesystem::temp_directory_path() / ("tandem-" + name + ".XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp " + pattern);
    path_ = pattern;
  }
  ~TestDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TestDir(const TestDir&) = delete;
  TestDir& operator=(const TestDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace tandem
