#pragma once
// Test helper: a shipped golden case (golden/cases/<name>) copied into a test's directory, edited
// (its manifest, its blob's tensors) and checked: the edit must make the case BadInput naming
// what was broken. The blob is re-serialized and re-hashed after every edit, so that the check
// reaches the edited field instead of stopping at the hash.
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "bad_input.hpp"
#include "core/atomic_file.hpp"
#include "core/safetensors.hpp"
#include "golden/golden.hpp"

namespace tandem {

class GoldenCaseEdit {
 public:
  using Edit = std::function<void(nlohmann::json& manifest, Safetensors& blob)>;

  GoldenCaseEdit(const std::filesystem::path& dir, const std::string& name)
      : dir_(dir), name_(name) {
    const std::filesystem::path shipped =
        std::filesystem::path(TANDEM_SOURCE_DIR) / "golden" / "cases";
    manifest_ = nlohmann::json::parse(read_file(shipped / (name + ".json")));
    blob_name_ = manifest_["blob"].get<std::string>();
    blob_ = read_file(shipped / blob_name_);
  }
  const nlohmann::json& manifest() const { return manifest_; }

  // The shipped case with `edit` applied must be BadInput whose message contains `expect`.
  void expect_bad_input(const Edit& edit, const std::string& expect) const {
    nlohmann::json m = manifest_;
    Safetensors st = parse_safetensors(blob_, blob_name_);
    edit(m, st);
    const std::string bytes = serialize_safetensors(st);
    m["blob_sha256"] = sha256_hex(bytes);
    write_file_atomic(dir_ / blob_name_, std::string_view(bytes));
    const std::filesystem::path manifest = dir_ / (name_ + ".json");
    write_file_atomic(manifest, std::string_view(m.dump()));
    tandem::expect_bad_input([&] { golden::check_case(manifest, {}); }, expect);
  }
  // The same for an edit of the manifest only.
  void expect_bad_manifest(const std::function<void(nlohmann::json&)>& edit,
                           const std::string& expect) const {
    expect_bad_input([&](nlohmann::json& m, Safetensors&) { edit(m); }, expect);
  }

 private:
  std::filesystem::path dir_;
  std::string name_, blob_name_, blob_;
  nlohmann::json manifest_;
};

}  // namespace tandem
