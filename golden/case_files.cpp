#include "golden/case_files.hpp"

#include <algorithm>
#include <cctype>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/json_fields.hpp"

namespace tandem::golden {
namespace fs = std::filesystem;
namespace {

// The blob a manifest names, or "" when it cannot be read (a broken case keeps its files).
std::string named_blob(const fs::path& manifest) {
  try {
    const nlohmann::json j = parse_json(read_file(manifest, kMaxJsonBytes), manifest.string());
    return j.contains("blob") && j["blob"].is_string() ? j["blob"].get<std::string>() : "";
  } catch (const BadInput&) {
    return "";
  }
}

// "<case>.safetensors" (the older naming) or "<case>.<16 hex digits>.safetensors".
bool is_blob_of(const std::string& file, const std::string& case_name) {
  constexpr std::string_view ext = ".safetensors";
  if (file == case_name + std::string(ext)) return true;
  const std::string prefix = case_name + ".";
  if (!file.starts_with(prefix) || !file.ends_with(ext) ||
      file.size() != prefix.size() + 16 + ext.size())
    return false;
  return std::all_of(file.begin() + prefix.size(), file.end() - ext.size(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

}  // namespace

fs::path file_in(const fs::path& dir, std::string_view name, const std::string& where) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos)
    throw_bad_input("{}: a file name in the case directory, got '{}'", where, brief_text(name));
  const fs::path p = dir / std::string(name);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(p, ec))) return p;
  const fs::path real = fs::weakly_canonical(p, ec);
  std::error_code ec_dir;
  const fs::path root = fs::weakly_canonical(dir, ec_dir);
  if (ec || ec_dir || real.parent_path() != root)
    throw_bad_input("{}: '{}' resolves to {}, outside the case directory {}", where,
                    brief_text(name), ec ? std::string("an unresolvable path") : real.string(),
                    root.string());
  return p;
}

std::vector<fs::path> list_manifests(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw_bad_input("{}: not a directory", dir.string());
  std::vector<fs::path> out;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->path().extension() == ".json") out.push_back(it->path());
  if (ec) throw_bad_input("{}: cannot list the directory: {}", dir.string(), ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

std::string blob_file_name(const std::string& case_name, const std::string& sha256_hex) {
  return case_name + "." + sha256_hex.substr(0, 16) + ".safetensors";
}

void replace_case(const fs::path& dir, const std::string& name, std::string_view blob_bytes,
                  nlohmann::json manifest) {
  const fs::path manifest_path = file_in(dir, name + ".json", name);
  // The blob the old manifest names, when it is this case's blob in this directory: a hostile
  // or broken manifest naming another file (another case's manifest, say) never gets it removed.
  fs::path old_blob;
  try {
    const std::string named = fs::exists(manifest_path) ? named_blob(manifest_path) : "";
    if (is_blob_of(named, name)) old_blob = file_in(dir, named, manifest_path.string());
  } catch (const BadInput&) {
  }
  const std::string sha = sha256_hex(blob_bytes);
  const fs::path blob = file_in(dir, blob_file_name(name, sha), name);
  manifest["blob"] = blob.filename().string();
  manifest["blob_sha256"] = sha;
  const bool blob_existed = fs::exists(fs::symlink_status(blob));
  write_file_atomic(blob, blob_bytes);
  try {
    write_file_atomic(manifest_path, std::string_view(manifest.dump(2) + "\n"));  // the commit
  } catch (const BadInput&) {
    std::error_code ec;  // no manifest names the new blob: take it back
    if (!blob_existed) fs::remove(blob, ec);
    throw;
  }
  if (!old_blob.empty() && old_blob != blob) {
    std::error_code ec;  // failing, it leaves a leftover for remove_leftovers
    fs::remove(old_blob, ec);
  }
}

void remove_leftovers(const fs::path& dir) {
  remove_stale_temporaries(dir);
  for (const fs::path& manifest : list_manifests(dir)) {
    try {
      file_in(dir, manifest.filename().string(), dir.string());  // never read through a link out
    } catch (const BadInput&) {
      continue;
    }
    const std::string blob = named_blob(manifest);
    if (blob.empty()) continue;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string f = e.path().filename().string();
      if (f != blob && is_blob_of(f, manifest.stem().string())) fs::remove(e.path(), ec);
    }
  }
}

}  // namespace tandem::golden
