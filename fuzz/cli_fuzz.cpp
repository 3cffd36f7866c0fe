// The tandem program's argument parsing (app/commands): any argv gives success or BadInput
// (exit 0 or 2, a message on stderr), never a crash, an internal error (exit 3) or an uncaught
// exception. The input is NUL-separated words; commands run with execute = false (flags and the
// files they name are validated; nothing long runs and nothing is written), inside a private
// directory holding a valid config, a preset and one golden case that the words may name.
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "core/atomic_file.hpp"
#include "core/model_config.hpp"
#include "fuzz/fuzz_util.hpp"

namespace {

namespace fs = std::filesystem;

// The sandbox, made once per process and removed when it exits: "tiny.json", "preset.json",
// "cases/".
struct Sandbox {
  const tandem::PrivateTempDir dir{fs::temp_directory_path()};
  Sandbox() {
    const fs::path src(TANDEM_SOURCE_DIR), d = dir.path();
    tandem::write_file_atomic(
        d / "tiny.json", std::string_view(tandem::to_json(tandem::builtin_model("tiny")).dump()));
    fs::copy_file(src / "sim/presets/v4.1-flash-gh200.json", d / "preset.json");
    fs::create_directories(d / "cases");
    for (const char* f : {"dspark_verify_greedy.json", "dspark_verify_greedy.safetensors"})
      fs::copy_file(src / "golden/cases" / f, d / "cases" / f);
  }
};

const fs::path& sandbox() {
  static const Sandbox made;
  return made.dir.path();
}

// Runs inside the sandbox and returns to libFuzzer's directory (its corpus paths are relative).
struct InSandbox {
  const fs::path back = fs::current_path();
  InSandbox() { fs::current_path(sandbox()); }
  ~InSandbox() { fs::current_path(back); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> words{"tandem"};
  std::string word;
  for (size_t i = 0; i < size && words.size() < 32; ++i) {
    if (data[i] != 0) {
      word += static_cast<char>(data[i]);
      continue;
    }
    words.push_back(word), word.clear();
  }
  if (!word.empty() && words.size() < 32) words.push_back(word);
  // Paths stay inside the sandbox: no separator, no "..".
  for (std::string& w : words)
    if (w.find('/') != std::string::npos || w.find("..") != std::string::npos) w = "x";
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());
  std::ostringstream out, err;
  const InSandbox in_sandbox;
  const int code = tandem::app::run(static_cast<int>(argv.size()), argv.data(), out, err, false);
  if (code != 0 && code != 2) tandem::fuzz::fail("exit " + std::to_string(code) + ": " + err.str());
  if (code == 2 && err.str().empty()) tandem::fuzz::fail("exit 2 without a message");
  return 0;
}
