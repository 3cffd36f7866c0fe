// Golden manifest reader and checker (golden/golden): the input is a manifest written beside the
// shipped blobs; it is a passing or failing case, or BadInput naming the file and field.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "fuzz/fuzz_util.hpp"
#include "golden/golden.hpp"

namespace {

namespace fs = std::filesystem;

// A scratch directory holding copies of the shipped blobs, once per process and removed when it
// exits (copies: a symlink leading out of a case directory is refused).
struct Scratch {
  const tandem::PrivateTempDir dir{fs::temp_directory_path()};
  Scratch() {
    for (const auto& e : fs::directory_iterator(fs::path(TANDEM_SOURCE_DIR) / "golden/cases"))
      if (e.path().extension() == ".safetensors")
        fs::copy_file(e.path(), dir.path() / e.path().filename());
  }
};

const fs::path& scratch() {
  static const Scratch made;
  return made.dir.path();
}

// The manifest's own name when it is a plain identifier (so it can match its file name).
std::string file_stem(std::string_view text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_object() && j.contains("name") && j["name"].is_string()) {
    const std::string n = j["name"];
    if (!n.empty() && n.size() < 64 &&
        n.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos)
      return n;
  }
  return "case";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const fs::path manifest = scratch() / (file_stem(text) + ".json");
  write_file_atomic(manifest, text);
  try {
    golden::check_case(manifest, RunOptions{});
  } catch (const BadInput&) {
  }
  fs::remove(manifest);
  return 0;
}
