#include "golden/golden.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cases/case_check.hpp"
#include "core/atomic_file.hpp"
#include "core/git_commit.hpp"
#include "core/json_fields.hpp"
#include "core/safetensors.hpp"
#include "golden/case_files.hpp"

namespace tandem::golden {
namespace {

LoadedCase load_case(const std::filesystem::path& manifest_path) {
  const std::string src = manifest_path.string();
  file_in(manifest_path.parent_path(), manifest_path.filename().string(), src);
  LoadedCase c;
  c.manifest = parse_json(read_file(manifest_path, kMaxJsonBytes), src);
  const JsonFields f(c.manifest, src);
  f.reject_unknown({"format_version", "component", "name", "config", "seed", "generator_commit",
                    "blob", "blob_sha256", "outputs"});
  if (f.integer("format_version", 0, 1 << 20) != kFormatVersion)
    throw_bad_input("{}: this tandem reads version {}", f.where("format_version"), kFormatVersion);
  c.component = f.string("component");
  if (!find_component(c.component))
    throw_bad_input("{}: unknown component '{}'", f.where("component"), c.component);
  c.name = f.string("name");
  if (c.name != manifest_path.stem().string())
    throw_bad_input("{}: '{}' does not match the file name", f.where("name"), c.name);
  f.unsigned_integer("seed");
  f.string("generator_commit");
  f.object("config");
  const std::string blob = f.string("blob");
  c.blob_source = file_in(manifest_path.parent_path(), blob, f.where("blob")).string();
  const JsonFields outputs = f.object("outputs");
  if (c.manifest.at("outputs").empty())
    throw_bad_input("{}: no outputs listed (the case would compare nothing)", f.where("outputs"));
  for (const auto& [name, v] : c.manifest.at("outputs").items()) {
    if (name.empty() || name.find('\0') != std::string::npos)
      throw_bad_input("{}: an output named '{}'", outputs.where(""), brief_text(name));
    const JsonFields output = outputs.object(name.c_str());
    output.reject_unknown({"rule"});
    const std::string rule = output.string("rule");
    if (rule != "tolerance" && rule != "exact" && rule != "reference")
      throw_bad_input("{}: unknown rule '{}'", outputs.where(name), rule);
    c.outputs.emplace_back(name, rule);
  }
  const std::string bytes = read_file(c.blob_source);
  const std::string sha = sha256_hex(bytes);
  if (sha != f.string("blob_sha256"))
    throw_bad_input("{}: {} has SHA-256 {}, the manifest says {}", f.where("blob_sha256"),
                    c.blob_source, sha, f.string("blob_sha256"));
  c.blob = parse_safetensors(bytes, c.blob_source);
  // Inputs and expectations are finite: a NaN stored by accident must not pass as "equal" or
  // be blamed on the kernels. The tensors a component names may hold +-inf, never NaN.
  const std::vector<std::string>& infinite = find_component(c.component)->infinite_tensors;
  for (const auto& [name, t] : c.blob.tensors) {
    if (t.dtype != DType::F64 && t.dtype != DType::F32) continue;
    const bool inf_ok = std::find(infinite.begin(), infinite.end(), name) != infinite.end();
    const std::vector<double> v = as_doubles(t);
    const auto bad = std::find_if(
        v.begin(), v.end(), [&](double x) { return inf_ok ? std::isnan(x) : !std::isfinite(x); });
    if (bad != v.end())
      throw_bad_input("{}: tensor '{}' holds {} at element {} (stored tensors are finite)",
                      c.blob_source, name, *bad, bad - v.begin());
  }
  return c;
}

// Compares a regenerated blob with the one on disk, appending a per-tensor delta report.
bool same_as_on_disk(const std::filesystem::path& manifest_path, const BuiltCase& built,
                     std::vector<std::string>& deltas) {
  const Safetensors& fresh = built.blob;
  try {
    const LoadedCase old = load_case(manifest_path);
    auto rules = [](auto outputs) {  // manifests list outputs by name
      std::sort(outputs.begin(), outputs.end());
      return outputs;
    };
    bool same =
        old.manifest.at("config") == built.config && rules(old.outputs) == rules(built.outputs);
    if (!same) deltas.push_back("config or output rules: CHANGED");
    for (const auto& [name, t] : fresh.tensors) {
      const auto it = old.blob.tensors.find(name);
      if (it == old.blob.tensors.end() || it->second.shape != t.shape) {
        deltas.push_back(fmt::format("{}: CHANGED (new or reshaped)", name));
        same = false;
      } else if (name.rfind("expected.", 0) != 0) {
        if (it->second.bytes != t.bytes)
          deltas.push_back(fmt::format("input {}: CHANGED", name)), same = false;
      } else {
        const Delta dl = delta(as_doubles(t), as_doubles(it->second));
        same &= dl.within();
        deltas.push_back(fmt::format("{}: max |new - old| = {:.3e} ({})", name.substr(9),
                                     dl.max_abs, dl.within() ? "unchanged" : "CHANGED"));
      }
    }
    return same;
  } catch (const BadInput& e) {
    deltas.push_back(fmt::format("existing case unreadable: {}", e.what()));
    return false;
  }
}

// Whether a regen names the case (an empty `only` names every case).
bool selected(const GoldenSpec& spec, const std::vector<std::string>& only) {
  return only.empty() || std::find(only.begin(), only.end(), spec.name) != only.end();
}

// Regenerates one generator case into `dir` (only if named in `only`, when given).
void regen_one(const std::filesystem::path& dir, const std::string& component,
               const GoldenSpec& spec, bool accept, const std::vector<std::string>& only,
               std::vector<RegenReport>& reports) {
  if (!selected(spec, only)) return;
  RegenReport r{spec.name, {}, false, false};
  BuiltCase built = spec.build(spec.seed);
  built.blob.metadata = {{"component", component}, {"case", spec.name}};
  const auto manifest_path = file_in(dir, spec.name + ".json", dir.string());
  const bool exists = std::filesystem::exists(std::filesystem::symlink_status(manifest_path));
  if (exists)
    r.changed = !same_as_on_disk(manifest_path, built, r.deltas);
  else
    r.deltas.push_back("new case");
  // Unchanged cases stay untouched; changed expectations need --accept.
  if (exists && (!r.changed || !accept)) {
    reports.push_back(std::move(r));
    return;
  }
  nlohmann::json outputs = nlohmann::json::object();
  for (const auto& [n, rule] : built.outputs) outputs[n] = {{"rule", rule}};
  replace_case(dir, spec.name, serialize_safetensors(built.blob),
               {{"format_version", kFormatVersion},
                {"component", component},
                {"name", spec.name},
                {"config", built.config},
                {"seed", spec.seed},
                {"generator_commit", kGitCommit},
                {"outputs", outputs}});
  r.written = true;
  reports.push_back(std::move(r));
}

}  // namespace

std::vector<std::filesystem::path> list_cases(const std::filesystem::path& dir) {
  return list_manifests(dir);
}

std::vector<std::string> generator_case_names() {
  std::vector<std::string> n;
  for (const Component& c : registry())
    for (const GoldenSpec& s : c.golden_specs()) n.push_back(s.name);
  return n;
}

CaseReport check_case(const std::filesystem::path& manifest, const RunOptions& opt) {
  const LoadedCase c = load_case(manifest);
  try {
    CaseReport report = find_component(c.component)->check(c, opt);
    // The manifest's outputs are the ones compared: none missing, none invented.
    for (const auto& output : c.outputs)
      if (std::none_of(report.tensors.begin(), report.tensors.end(),
                       [&](const CheckedTensor& t) { return t.name == output.first; }))
        throw_bad_input("{}: field 'outputs.{}': the {} case has no such output", manifest.string(),
                        brief_text(output.first), c.component);
    return report;
  } catch (const BadInput& e) {  // inputs the kernels refuse: say which case held them
    if (std::string_view(e.what()).find(c.blob_source) != std::string_view::npos) throw;
    throw_bad_input("{}: {}", c.blob_source, e.what());
  } catch (const KernelFault& e) {  // the code under test failed: this case FAILs, others run
    return {c.name, {{e.tensor(), "kernel output", false, e.what()}}};
  }
}

std::vector<RegenReport> regen_cases(const std::filesystem::path& dir, bool accept,
                                     const std::vector<std::string>& only) {
  const std::vector<std::string> known = generator_case_names();
  for (const std::string& name : only)
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw_bad_input("golden regen: no generator case '{}' (tandem golden list)", name);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_bad_input("{}: cannot create the directory: {}", dir.string(), ec.message());
  // Every path this run may write is checked (no link out of `dir`) before anything is written.
  for (const Component& c : registry()) {
    for (const SharedFile& f : c.shared_files()) file_in(dir, f.name, dir.string());
    for (const GoldenSpec& spec : c.golden_specs())
      if (selected(spec, only)) file_in(dir, spec.name + ".json", dir.string());
  }
  remove_leftovers(dir);
  for (const Component& c : registry())
    for (const SharedFile& f : c.shared_files()) {
      const std::filesystem::path path = file_in(dir, f.name, dir.string());
      if (!std::filesystem::exists(path) || read_file(path) != f.bytes)
        write_file_atomic(path, std::string_view(f.bytes));
    }

  std::vector<RegenReport> reports;
  for (const Component& component : registry())
    for (const GoldenSpec& spec : component.golden_specs())
      regen_one(dir, component.name, spec, accept, only, reports);
  return reports;
}

}  // namespace tandem::golden
