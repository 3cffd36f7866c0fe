#include "golden/golden.hpp"

#include <algorithm>
#include <cmath>

#include "core/atomic_file.hpp"
#include "core/json_fields.hpp"
#include "core/model_config.hpp"
#include "core/safetensors.hpp"
#include "golden/residual_case.hpp"

#ifndef TANDEM_GIT_COMMIT
#define TANDEM_GIT_COMMIT "unknown"
#endif

namespace tandem::golden {

struct CaseSpec {
  std::string name;
  ResidualConfig cfg;
  ResidualPath path;
  ActDType act;
  uint64_t seed;
};

namespace {

ResidualConfig residual_cfg(int d, int sites, int tokens) {
  ResidualConfig c;
  c.d = d, c.sites = sites, c.tokens = tokens;
  return c;
}

// The generator's cases; `tandem golden regen` writes exactly these. Add a case: one line.
const std::vector<CaseSpec>& specs() {
  static const std::vector<CaseSpec> s = {
      {"residual_v4_f32", residual_cfg(64, 3, 4), ResidualPath::v4_unfused, ActDType::f32, 101},
      {"residual_v41_f32", residual_cfg(64, 3, 4), ResidualPath::v41_single_pass, ActDType::f32,
       102},
      {"residual_v41_bf16", residual_cfg(128, 4, 3), ResidualPath::v41_single_pass, ActDType::bf16,
       103},
      {"residual_v4_bf16_d8", residual_cfg(8, 2, 2), ResidualPath::v4_unfused, ActDType::bf16, 104},
  };
  return s;
}

ResidualPath parse_path(const JsonFields& f) {
  const std::string p = f.string("path");
  if (p == residual_path_name(ResidualPath::v4_unfused)) return ResidualPath::v4_unfused;
  if (p == residual_path_name(ResidualPath::v41_single_pass)) return ResidualPath::v41_single_pass;
  throw_bad_input("{}: expected v4-unfused or v41-single-pass, got '{}'", f.where("path"), p);
}

ActDType parse_act(const JsonFields& f) {
  const std::string a = f.string("act");
  if (a == "f32") return ActDType::f32;
  if (a == "bf16") return ActDType::bf16;
  throw_bad_input("{}: expected f32 or bf16, got '{}'", f.where("act"), a);
}

std::vector<std::string> output_names(int sites) {
  std::vector<std::string> names;
  for (int l = 0; l < sites; ++l) {
    names.push_back(fmt::format("site{}.y", l));
    names.push_back(fmt::format("site{}.x", l));
  }
  names.push_back("y_out");
  names.push_back("x_out");
  return names;
}

// Views a reference output set as (name, tensor) pairs in output_names() order.
std::vector<Tensor<double>*> output_tensors(reference::ResidualRefOutputs& o) {
  std::vector<Tensor<double>*> t;
  for (size_t l = 0; l < o.taps_y.size(); ++l) t.push_back(&o.taps_y[l]), t.push_back(&o.taps_x[l]);
  t.push_back(&o.y_out);
  t.push_back(&o.x_out);
  return t;
}

void put_expected(Safetensors& st, reference::ResidualRefOutputs o, int sites) {
  const auto names = output_names(sites);
  const auto tensors = output_tensors(o);
  for (size_t i = 0; i < names.size(); ++i) st.put("expected." + names[i], *tensors[i]);
}

reference::ResidualRefOutputs get_expected(const Safetensors& st, int sites,
                                           const std::string& source) {
  reference::ResidualRefOutputs o;
  o.taps_y.resize(sites), o.taps_x.resize(sites);
  const auto names = output_names(sites);
  const auto tensors = output_tensors(o);
  for (size_t i = 0; i < names.size(); ++i)
    *tensors[i] = st.get_as<double>("expected." + names[i], source);
  return o;
}

// Largest |a - b| and whether it is within 1e-12 of b's largest magnitude. The double reference
// is deterministic; 1e-12 leaves room only for compilers contracting or reordering its sums.
struct Delta {
  double max_abs = 0, scale = 0;
  bool within() const { return max_abs <= 1e-12 * scale; }
};
Delta delta(const Tensor<double>& a, const Tensor<double>& b) {
  Delta d;
  if (a.shape != b.shape) return {INFINITY, 0};
  for (int64_t i = 0; i < a.size(); ++i) {
    d.max_abs = std::max(d.max_abs, std::fabs(a.data[i] - b.data[i]));
    d.scale = std::max(d.scale, std::fabs(b.data[i]));
  }
  if (std::isnan(d.max_abs)) d.max_abs = INFINITY;
  return d;
}

struct LoadedCase {
  std::string name;
  ResidualConfig cfg;
  ResidualPath path;
  ActDType act;
  Safetensors blob;
  std::string blob_source;
};

LoadedCase load_case(const std::filesystem::path& manifest_path) {
  const std::string src = manifest_path.string();
  const nlohmann::json j = parse_json(read_file(manifest_path), src);
  const JsonFields f(j, src);
  f.reject_unknown({"format_version", "component", "name", "config", "seed", "generator_commit",
                    "blob", "blob_sha256", "outputs"});
  if (f.integer("format_version", 0, 1 << 20) != kFormatVersion)
    throw_bad_input("{}: this tandem reads version {}", f.where("format_version"), kFormatVersion);
  if (f.string("component") != "residual")
    throw_bad_input("{}: unknown component '{}'", f.where("component"), f.string("component"));
  LoadedCase c;
  c.name = f.string("name");
  if (c.name != manifest_path.stem().string())
    throw_bad_input("{}: '{}' does not match the file name", f.where("name"), c.name);
  f.unsigned_integer("seed");
  f.string("generator_commit");
  const JsonFields config = f.object("config");
  config.reject_unknown({"residual", "path", "act"});
  c.cfg = parse_residual_config(config.object("residual"));
  c.path = parse_path(config);
  c.act = parse_act(config);
  const std::string blob = f.string("blob");
  if (blob.find('/') != std::string::npos || blob.empty())
    throw_bad_input("{}: a file name beside the manifest, got '{}'", f.where("blob"), blob);
  const JsonFields outputs = f.object("outputs");
  for (const auto& name : output_names(c.cfg.sites)) {
    const std::string rule = outputs.object(name.c_str()).string("rule");
    if (rule != "tolerance") throw_bad_input("{}: unknown rule '{}'", outputs.where(name), rule);
  }
  c.blob_source = (manifest_path.parent_path() / blob).string();
  const std::string bytes = read_file(c.blob_source);
  const std::string sha = sha256_hex(bytes);
  if (sha != f.string("blob_sha256"))
    throw_bad_input("{}: {} has SHA-256 {}, the manifest says {}", f.where("blob_sha256"),
                    c.blob_source, sha, f.string("blob_sha256"));
  c.blob = parse_safetensors(bytes, c.blob_source);
  return c;
}

// Compares a regenerated case with the one on disk, appending a per-tensor delta report.
bool same_as_on_disk(const std::filesystem::path& manifest_path, const Safetensors& fresh,
                     reference::ResidualRefOutputs& truth, int sites,
                     std::vector<std::string>& deltas) {
  try {
    const LoadedCase old = load_case(manifest_path);
    bool same = old.cfg.sites == sites;
    for (const auto& [name, t] : fresh.tensors) {
      if (name.rfind("expected.", 0) == 0) continue;
      const auto it = old.blob.tensors.find(name);
      const bool same_input = it != old.blob.tensors.end() && it->second.bytes == t.bytes &&
                              it->second.shape == t.shape;
      if (!same_input) deltas.push_back(fmt::format("input {}: CHANGED", name));
      same &= same_input;
    }
    if (!same) return false;
    reference::ResidualRefOutputs prev = get_expected(old.blob, sites, old.blob_source);
    const auto names = output_names(sites);
    const auto a = output_tensors(truth), b = output_tensors(prev);
    for (size_t i = 0; i < names.size(); ++i) {
      const Delta dl = delta(*a[i], *b[i]);
      same &= dl.within();
      deltas.push_back(fmt::format("{}: max |new - old| = {:.3e} ({})", names[i], dl.max_abs,
                                   dl.within() ? "unchanged" : "CHANGED"));
    }
    return same;
  } catch (const BadInput& e) {
    deltas.push_back(fmt::format("existing case unreadable: {}", e.what()));
    return false;
  }
}

}  // namespace

bool CaseReport::pass() const {
  return std::all_of(tensors.begin(), tensors.end(), [](const CheckedTensor& t) { return t.pass; });
}

std::vector<std::filesystem::path> list_cases(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) throw_bad_input("{}: not a directory", dir.string());
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> generator_case_names() {
  std::vector<std::string> n;
  for (const auto& s : specs()) n.push_back(s.name);
  return n;
}

CaseReport check_case(const std::filesystem::path& manifest, const RunOptions& opt) {
  const LoadedCase c = load_case(manifest);
  const ResidualStackInputs in = get_residual_inputs(c.blob, c.cfg, c.act, c.blob_source);
  reference::ResidualRefOutputs expected = get_expected(c.blob, c.cfg.sites, c.blob_source);
  reference::ResidualRefOutputs truth = reference::run_truth(in, c.path);
  CaseReport report{c.name, {}};
  const auto names = output_names(c.cfg.sites);
  const auto now = output_tensors(truth), stored = output_tensors(expected);
  for (size_t i = 0; i < names.size(); ++i) {
    const Delta dl = delta(*now[i], *stored[i]);
    report.tensors.push_back({names[i], "ref-1e-12", dl.within(),
                              fmt::format("reference max |now - stored| = {:.3e} (limit {:.3e})",
                                          dl.max_abs, 1e-12 * dl.scale)});
  }
  const auto baseline = baseline_error_draws(in, c.path, expected);
  const auto optimized = run_residual_stack(in, c.path, opt);
  for (const auto& t : compare_residual(expected, baseline, optimized, c.act))
    report.tensors.push_back({t.name, "tolerance", t.result.pass, t.result.summary()});
  return report;
}

std::vector<RegenReport> regen_cases(const std::filesystem::path& dir, bool accept) {
  std::filesystem::create_directories(dir);
  std::vector<RegenReport> reports;
  for (const CaseSpec& spec : specs()) {
    RegenReport r{spec.name, {}, false, false};
    const ResidualStackInputs in =
        make_residual_inputs(spec.cfg, spec.cfg.tokens, spec.act, spec.seed);
    reference::ResidualRefOutputs truth = reference::run_truth(in, spec.path);
    Safetensors st;
    st.metadata = {{"component", "residual"}, {"case", spec.name}};
    put_residual_inputs(st, in);
    put_expected(st, truth, spec.cfg.sites);
    const auto manifest_path = dir / (spec.name + ".json");
    const bool exists = std::filesystem::exists(manifest_path);
    if (exists) {
      r.changed = !same_as_on_disk(manifest_path, st, truth, spec.cfg.sites, r.deltas);
    } else {
      r.deltas.push_back("new case");
    }
    // Unchanged cases stay untouched; changed expectations need --accept.
    if (exists && (!r.changed || !accept)) {
      reports.push_back(std::move(r));
      continue;
    }
    const std::string blob_name = spec.name + ".safetensors";
    const std::string bytes = serialize_safetensors(st);
    nlohmann::json outputs = nlohmann::json::object();
    for (const auto& n : output_names(spec.cfg.sites)) outputs[n] = {{"rule", "tolerance"}};
    const nlohmann::json manifest = {{"format_version", kFormatVersion},
                                     {"component", "residual"},
                                     {"name", spec.name},
                                     {"config",
                                      {{"residual", to_json(spec.cfg)},
                                       {"path", residual_path_name(spec.path)},
                                       {"act", act_dtype_name(spec.act)}}},
                                     {"seed", spec.seed},
                                     {"generator_commit", TANDEM_GIT_COMMIT},
                                     {"blob", blob_name},
                                     {"blob_sha256", sha256_hex(bytes)},
                                     {"outputs", outputs}};
    write_file_atomic(dir / blob_name, std::string_view(bytes));
    write_file_atomic(manifest_path, std::string_view(manifest.dump(2) + "\n"));
    r.written = true;
    reports.push_back(std::move(r));
  }
  return reports;
}

}  // namespace tandem::golden
