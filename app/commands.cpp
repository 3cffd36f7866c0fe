#include "app/commands.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <optional>
#include <ostream>
#include <system_error>

#include "app/verify.hpp"
#include "cases/engram_case.hpp"
#include "core/atomic_file.hpp"
#include "core/dspark_config.hpp"
#include "core/error.hpp"
#include "core/git_commit.hpp"
#include "core/json_fields.hpp"
#include "golden/golden.hpp"
#include "optimized/emu/hazard.hpp"
#include "problem/dense.hpp"
#include "problem/vision.hpp"
#include "sim/traffic.hpp"

namespace tandem::app {
namespace {

// Numeric flags are plain decimal as typed ("010" is not octal 8, "0x10" not 16, "" not the
// default) and fit their type; the error quotes the value.
const CLI::Validator kDecimalInteger(
    [](std::string& text) -> std::string {
      const bool sign = !text.empty() && text[0] == '-';
      const std::string_view digits = std::string_view(text).substr(sign);
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (digits.empty() || (digits.size() > 1 && digits[0] == '0') ||
          end != text.data() + text.size())
        return "expected a decimal integer, got '" + brief_text(text) + "'";
      if (ec != std::errc()) return "'" + brief_text(text) + "' is out of range";
      return "";
    },
    "INT");
const CLI::Validator kDecimalNumber(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const bool hex = text.find_first_of("xX") != std::string::npos;
      if (text.empty() || hex || std::isspace(static_cast<unsigned char>(text[0])) ||
          (std::strtod(text.c_str(), &end), end != text.c_str() + text.size()))
        return "expected a decimal number, got '" + brief_text(text) + "'";
      return "";
    },
    "NUMBER");

struct BackendFlags {
  std::string backend = "auto";
  std::string schedule = "in-order";
  int block_threads = 128;
  int block_workers = 2;
  bool no_hazard_check = false;

  void add_to(CLI::App& cmd) {
    cmd.add_option("--backend", backend, "auto (cuda if a GPU is found, else emu), emu or cuda")
        ->check(CLI::IsMember({"auto", "emu", "cuda"}));
    cmd.add_option("--schedule", schedule, "emu resume order: in-order, reversed, shuffled:SEED");
    cmd.add_option("--block-threads", block_threads, "threads per block (multiple of 32)")
        ->check(kDecimalInteger);
    cmd.add_option("--block-workers", block_workers,
                   fmt::format("emu: host threads running each launch's blocks, in [1, {}] "
                               "(default 2; results, byte counts and hazard reports do not "
                               "depend on it)",
                               emu::kMaxBlockWorkers))
        ->check(kDecimalInteger & CLI::Range(1, emu::kMaxBlockWorkers));
    cmd.add_flag("--no-hazard-check", no_hazard_check,
                 "emu: do not watch shared memory for races (faster; on by default)");
  }
  RunOptions resolve() const {
    emu::set_hazard_check(!no_hazard_check);  // process-wide: every command says it anew
    RunOptions o;
    o.backend = backend == "auto"   ? best_backend()
                : backend == "cuda" ? Backend::cuda
                                    : Backend::emu;
    if (o.backend == Backend::cuda && !cuda_status().available)
      throw_bad_input("--backend cuda: {}", cuda_status().detail);
    o.schedule = emu::parse_schedule(schedule);
    o.block_threads = block_threads;
    o.block_workers = block_workers;
    return o;
  }
};

// `tandem verify --weights DIR --layer L`: what the rows run on.
struct CheckpointFlags {
  std::string dir, release = "v4.1-flash", release_file;
  int layer = -1;
  int64_t tokens = 0;  // --tokens; 0: not given (2 with --weights, else the config's)
};

// The widths the checkpoint rows' kernels take (the residual's staged rows, the gate's experts in
// a warp's registers), named in the release's terms before anything runs.
void check_release_widths(const ReleaseConfig& r, const std::string& source) {
  static_assert(kResidualMaxWidth <= kDenseMaxInputs, "the router's logits are dense rows");
  if (r.hidden % 8 != 0 || r.hidden > kResidualMaxWidth)
    throw_bad_input("{}: field 'hidden': a multiple of 8 up to {} for the kernels, got {}", source,
                    kResidualMaxWidth, r.hidden);
  if (r.routed_experts > kMoeMaxExperts || r.top_k > kMoeMaxTopK)
    throw_bad_input(
        "{}: fields 'routed_experts' / 'top_k': the gate takes up to {} experts and "
        "top-{}, got {} and {}",
        source, kMoeMaxExperts, kMoeMaxTopK, r.routed_experts, r.top_k);
}

// The components a config could not run, named under the heading and in the JSON's "not_run":
// `refused` with their reasons ("name: why"), `missing` (names) for want of their sections.
int print_rows(const std::vector<VerifyRow>& rows, std::string what, const RunOptions& opt,
               bool json, std::ostream& out, const std::vector<std::string>& refused = {},
               const std::vector<std::string>& missing = {}) {
  if (!missing.empty())
    what += fmt::format(" (not run, sections missing: {})", fmt::join(missing, ", "));
  std::vector<std::string> not_run = refused;
  for (const std::string& c : missing) not_run.push_back(c + ": sections missing");
  const auto j = to_json(rows, what, not_run);
  if (json) {
    out << j.dump(2) << "\n";
  } else {
    out << fmt::format("tandem verify: {} on {}{}\n", what, backend_name(opt.backend),
                       opt.backend == Backend::emu ? emu::hazard_check()
                                                         ? ", shared memory checked for races"
                                                         : ", shared memory NOT checked for races"
                                                   : "");
    for (const std::string& r : refused) out << "  not run: " << r << "\n";
    out << render_table(rows) << (j["pass"].get<bool>() ? "all cases PASS\n" : "FAILED\n");
  }
  return j["pass"].get<bool>() ? 0 : 1;
}

// --tokens N on a config: the token counts its rows run (residual.tokens, engram.tokens and
// model.prompt_tokens where the config has those sections); the sections' checks then apply.
void with_tokens(nlohmann::json& j, int64_t tokens) {
  for (const auto& [section, field] :
       {std::pair{"residual", "tokens"}, {"engram", "tokens"}, {"model", "prompt_tokens"}})
    if (j.is_object() && j.contains(section) && j[section].is_object()) j[section][field] = tokens;
}

int cmd_verify(const std::string& model_name, const std::string& config_path, bool json,
               const std::vector<std::string>& components, const BackendFlags& flags,
               const CheckpointFlags& weights, int jobs, bool execute, std::ostream& out) {
  const RunOptions opt = flags.resolve();
  if (!weights.dir.empty()) {
    if (weights.layer < 0) throw_bad_input("--weights: give the layer to verify (--layer L)");

    if (!execute) return 0;  // parsing only: no file is read
    CheckpointLayer layer;
    layer.release = weights.release_file.empty() ? builtin_release(weights.release)
                                                 : load_release_config(weights.release_file);
    check_release_widths(layer.release, weights.release_file.empty()
                                            ? "--release " + weights.release
                                            : weights.release_file);
    layer.tokens = weights.tokens ? weights.tokens : 2;
    layer.seed = builtin_model("tiny").seed;
    // Engram's tensors (the table rows its tokens read) only where its row runs.
    const bool engram = components.empty() || std::ranges::count(components, "engram") > 0;
    layer.tensors = load_layer_tensors(
        Checkpoint(weights.dir), layer.release, weights.layer,
        engram ? engram_checkpoint_rows(layer.release, weights.layer, layer.tokens, layer.seed)
               : std::vector<int64_t>{});
    const auto rows =
        verify_checkpoint(layer, opt, !json && isatty(STDERR_FILENO), components, jobs);
    return print_rows(
        rows, fmt::format("{} layer {} of {}", layer.release.name, weights.layer, weights.dir), opt,
        json, out);
  }
  const std::string source = config_path.empty() ? "builtin:" + model_name : config_path;
  nlohmann::json j =
      config_path.empty() ? builtin_model_json(model_name) : load_model_json(config_path);
  if (weights.tokens) with_tokens(j, weights.tokens);
  const ModelConfig top = parse_model_config(j, source, {});  // an object, its name and seed
  const app::ConfigComponents chosen = app::components_of_config(j, source, components);
  if (!execute) return 0;
  const auto rows = verify_model(chosen.run, opt, !json && isatty(STDERR_FILENO), jobs);
  return print_rows(rows, "model " + top.name, opt, json, out, chosen.refused,
                    chosen.missing_sections);
}

int cmd_golden_list(const std::string& dir, std::ostream& out) {
  for (const auto& p : golden::list_cases(dir)) out << p.stem().string() << "\n";
  return 0;
}

int cmd_golden_check(const std::string& dir, const std::vector<std::string>& only,
                     const BackendFlags& flags, bool execute, std::ostream& out) {
  const RunOptions opt = flags.resolve();
  const std::vector<std::filesystem::path> manifests = golden::list_cases(dir);
  for (const std::string& name : only)  // a misspelt name must not pass by silently
    if (std::none_of(manifests.begin(), manifests.end(),
                     [&](const auto& p) { return p.stem().string() == name; }))
      throw_bad_input("golden check: no case '{}' in {} (tandem golden list --dir {})",
                      brief_text(name), dir, dir);
  if (manifests.empty()) throw_bad_input("{}: no golden cases (*.json)", dir);
  if (!execute) return 0;
  bool all = true;
  for (const auto& p : manifests) {
    if (!only.empty() && std::find(only.begin(), only.end(), p.stem().string()) == only.end())
      continue;
    const golden::CaseReport r = golden::check_case(p, opt);
    out << fmt::format("{:<24} {} ({} tensors, {})\n", r.name, r.pass() ? "PASS" : "FAIL",
                       r.tensors.size(), backend_name(opt.backend));
    for (const auto& t : r.tensors)
      if (!t.pass) out << fmt::format("  {} [{}]: {}\n", t.name, t.rule, t.detail);
    all &= r.pass();
  }
  return all ? 0 : 1;
}

int cmd_golden_regen(const std::string& dir, bool accept, const std::vector<std::string>& only,
                     bool execute, std::ostream& out) {
  if (!execute) {
    const std::vector<std::string> known = golden::generator_case_names();
    for (const std::string& name : only)
      if (std::find(known.begin(), known.end(), name) == known.end())
        throw_bad_input("golden regen: no generator case '{}' (tandem golden list)",
                        brief_text(name));
    return 0;
  }
  bool refused = false;
  for (const auto& r : golden::regen_cases(dir, accept, only)) {
    const char* what = r.written
                           ? (r.changed ? "REPLACED" : "written")
                           : (r.changed ? "REFUSED (expectations changed; --accept)" : "unchanged");
    out << fmt::format("{:<24} {}\n", r.name, what);
    for (const auto& d : r.deltas) out << "  " << d << "\n";
    refused |= r.changed && !r.written;
  }
  return refused ? 1 : 0;
}

// "WxH" in pixels, each side a decimal integer in [1, 2^31) (64-bit parse: "4294967297x1" must
// not wrap into a valid size). Errors quote the flag's value as typed.
sim::Image parse_image(const std::string& text) {
  const std::string_view t = text;
  const size_t x = t.find('x');
  int64_t side[2] = {0, 0};
  bool ok = x != std::string_view::npos;
  for (int i = 0; ok && i < 2; ++i) {
    const std::string_view part = i == 0 ? t.substr(0, x) : t.substr(x + 1);
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), side[i]);
    ok = !part.empty() && std::isdigit(static_cast<unsigned char>(part[0])) && ec == std::errc() &&
         end == part.data() + part.size();
  }
  if (!ok) throw_bad_input("--image: expected WxH (e.g. 1920x1080), got '{}'", text);
  if (side[0] < 1 || side[1] < 1 || side[0] > INT32_MAX || side[1] > INT32_MAX)
    throw_bad_input("--image '{}': width and height must be in [1, {}]", text, INT32_MAX);
  return {static_cast<int>(side[0]), static_cast<int>(side[1])};
}

// "--confidence 0.9,0.8": each item a number (its range is checked by the simulator); an empty
// item, or an empty list given explicitly, is an error quoting the flag's value.
std::vector<double> parse_confidences(const std::optional<std::string>& text) {
  std::vector<double> values;
  if (!text) return values;
  size_t begin = 0;
  for (;;) {
    const size_t end = std::min(text->find(',', begin), text->size());
    const std::string item = text->substr(begin, end - begin);
    char* stop = nullptr;
    const double v = item.empty() ? 0 : std::strtod(item.c_str(), &stop);
    if (item.empty() || stop != item.c_str() + item.size() || std::isspace(uint8_t(item[0])))
      throw_bad_input("--confidence '{}': expected comma-separated numbers, item '{}' is not one",
                      *text, item);
    values.push_back(v);
    if (end == text->size()) return values;
    begin = end + 1;
  }
}

// The DSpark decode row's measured acceptance per draft position in a `tandem verify --json`
// output (the sampled row when it ran, else the greedy one): the traffic workload's per-position
// confidences, and where they came from ("FILE (case NAME)").
std::pair<std::vector<double>, std::string> acceptance_from(const std::string& path) {
  const nlohmann::json j = parse_json(read_file(path, kMaxJsonBytes), path);
  if (!j.is_object()) throw_bad_input("{}: expected a `tandem verify --json` object", path);
  const JsonFields top(j, path);
  const nlohmann::json& cases = top.array("cases");
  std::optional<size_t> pick;
  for (size_t i = 0; i < cases.size(); ++i) {
    const JsonFields row = top.element("cases", i);
    if (!row.has("acceptance_per_position")) continue;
    if (!pick || row.label("case").starts_with("decode/sampling")) pick = i;
  }
  if (!pick)
    throw_bad_input(
        "{}: no case has 'acceptance_per_position' (the dspark component's decode "
        "rows of `tandem verify --json`)",
        path);
  const JsonFields row = top.element("cases", *pick);
  const nlohmann::json& values = row.array("acceptance_per_position");
  if (values.empty() || values.size() > size_t(kDsparkMaxDraft))
    throw_bad_input("{}: expected 1 to {} values, got {}", row.where("acceptance_per_position"),
                    kDsparkMaxDraft, values.size());
  std::vector<double> out;
  for (size_t k = 0; k < values.size(); ++k) {
    if (!values[k].is_number() || !(values[k].get<double>() >= 0 && values[k].get<double>() <= 1))
      throw_bad_input("{}[{}]: expected a number in [0, 1], got {}",
                      row.where("acceptance_per_position"), k, brief(values[k]));
    out.push_back(values[k].get<double>());
  }
  return {out, fmt::format("{} (case {})", path, row.label("case"))};
}

struct TrafficFlags {
  std::string preset = "v4.1-flash", preset_file, out_dir, load = "high", act_dtype;
  std::string measured_acceptance;
  CLI::Option* acceptance_from_opt = nullptr;
  std::vector<std::string> images;
  std::optional<std::string> confidence_text;
  sim::Workload w;
  bool json = false;
  CLI::Option* preset_file_opt = nullptr;
  CLI::Option* out_opt = nullptr;

  void add_to(CLI::App& cmd) {
    auto* builtin =
        cmd.add_option("--preset", preset, "built-in preset: tiny, v4-flash, v4-pro, v4.1-flash")
            ->capture_default_str();
    preset_file_opt =
        cmd.add_option("--preset-file", preset_file, "preset JSON file (instead of --preset)")
            ->excludes(builtin);
    cmd.add_option("--batch", w.batch, "concurrent requests")
        ->capture_default_str()
        ->check(kDecimalInteger);
    cmd.add_option("--context", w.context, "context length in tokens")
        ->capture_default_str()
        ->check(kDecimalInteger);
    cmd.add_option("--image", images, "an image in the prompt, WxH pixels (repeatable)");
    auto* acceptance =
        cmd.add_option("--acceptance", w.acceptance, "DSpark i.i.d. acceptance per drafted token")
            ->check(kDecimalNumber)
            ->capture_default_str();
    auto* confidence =
        cmd.add_option("--confidence", confidence_text,
                       "DSpark per-position confidences, comma-separated (overrides --acceptance)");
    acceptance_from_opt =
        cmd.add_option(
               "--acceptance-from", measured_acceptance,
               "a `tandem verify --json` output: its DSpark decode row's measured acceptance "
               "per draft position is the workload's")
            ->excludes(acceptance)
            ->excludes(confidence);
    cmd.add_option("--load", load, "high (verify 1 per request) or low (verify all gamma)")
        ->check(CLI::IsMember({"high", "low"}));
    cmd.add_option("--act-dtype", act_dtype, "residual storage dtype (default: the preset's)")
        ->check(CLI::IsMember({"bf16", "f32"}));
    cmd.add_flag("--json", json, "print JSON instead of a table");
    out_opt = cmd.add_option("--out", out_dir,
                             "write report.json, report.csv, sweep.csv and SVG/PNG plots");
  }

  sim::Workload workload() const {
    sim::Workload r = w;
    r.high_load = load == "high";
    r.confidence = parse_confidences(confidence_text);
    if (acceptance_from_opt->count() > 0) {
      if (measured_acceptance.empty()) throw_bad_input("--acceptance-from: an empty path");
      std::tie(r.confidence, r.acceptance_from) = acceptance_from(measured_acceptance);
    }
    for (const std::string& img : images) r.images.push_back(parse_image(img));
    return r;
  }
};

int cmd_traffic(const TrafficFlags& f, bool execute, std::ostream& out) {
  if (f.preset_file_opt->count() > 0 && f.preset_file.empty())
    throw_bad_input("--preset-file: an empty path");
  if (f.out_opt->count() > 0 && f.out_dir.empty()) throw_bad_input("--out: an empty path");
  sim::Preset p = f.preset_file_opt->count() > 0 ? sim::load_preset(f.preset_file)
                                                 : sim::builtin_preset(f.preset);
  if (!f.act_dtype.empty()) p.act_bytes = f.act_dtype == "f32" ? 4 : 2;
  const sim::Report r = sim::simulate(p, f.workload());
  if (!f.out_dir.empty() && execute) sim::write_outputs(r, f.out_dir);  // may fail: nothing printed
  out << (f.json ? to_json(r).dump(2) + "\n" : to_table(r));
  if (!f.out_dir.empty() && execute) {
    if (!f.json)
      out << "wrote " << f.out_dir << "/{report.json,report.csv,sweep.csv,traffic_*.svg,png}\n";
  }
  return 0;
}

int cmd_info(std::ostream& out) {
  const BackendStatus cuda = cuda_status();
  out << fmt::format("tandem {} (commit {})\n", TANDEM_VERSION, kGitCommit);
#if defined(TANDEM_WITH_CUDA)
  out << "build: CUDA backend compiled (sm_90) + emulator\n";
#else
  out << "build: CPU-only (emulator)\n";
#endif
  out << fmt::format("backends: emu available; cuda {}: {}\n",
                     cuda.available ? "available" : "unavailable", cuda.detail);
  out << fmt::format("best backend: {}\n", backend_name(best_backend()));
  out << "models: tiny (built in)\n";
  // What the process started with (app/main.cpp adds glibc.malloc.hugetlb=1 when it is absent).
  // NOTE: getenv, not /proc/self/environ: glibc splits the started-with string in place when
  // it parses the tunables.
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  out << fmt::format(
      "allocator: GLIBC_TUNABLES={} (glibc.malloc.hugetlb=1: transparent huge "
      "pages for the heap; one arena, never trimmed, no block mapped alone)\n",
      tunables ? tunables : "(unset)");
  return 0;
}

// The leading words of argv name commands ("golden check"): an unknown one is named in the error
// (CLI11 alone reports only that a subcommand is required).
void check_command_words(CLI::App& app, int argc, const char* const* argv) {
  CLI::App* cmd = &app;
  for (int i = 1; i < argc && argv[i][0] != '-'; ++i) {
    const auto subs = cmd->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) return;  // a leaf command: the rest are its arguments
    const auto it = std::find_if(subs.begin(), subs.end(),
                                 [&](CLI::App* s) { return s->get_name() == argv[i]; });
    if (it == subs.end()) {
      std::string known;
      for (const CLI::App* s : subs) known += (known.empty() ? "" : ", ") + s->get_name();
      throw_bad_input("unknown command '{}' (known: {})", brief_text(argv[i]), known);
    }
    cmd = *it;
  }
}

}  // namespace

int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err, bool execute) {
  CLI::App app{
      "tandem: reference vs optimized verification harness for DeepSeek-V4.1-class "
      "serving kernels"};
  app.require_subcommand(1);
  int code = 0;

  auto* verify =
      app.add_subcommand("verify", "run every component of a model, reference vs optimized");
  std::string model = "tiny", config;
  bool json = false;
  BackendFlags vflags;
  auto* builtin = verify->add_option("--model", model, "built-in model name");
  auto* config_opt =
      verify->add_option("--config", config, "model config JSON file (instead of --model)")
          ->excludes(builtin);
  verify->add_flag("--json", json, "print JSON instead of a table");
  std::vector<std::string> components;
  verify->add_option("--component", components, "only this component's rows (repeatable)")
      ->check(CLI::IsMember(verify_components()));
  vflags.add_to(*verify);
  CheckpointFlags weights;
  auto* weights_opt =
      verify
          ->add_option("--weights", weights.dir,
                       "a released checkpoint's directory (model.safetensors.index.json and "
                       "shards): verify the components that run on one layer's tensors")
          ->excludes(builtin)
          ->excludes(config_opt);
  verify->add_option("--layer", weights.layer, "the layer to verify (with --weights)")
      ->check(kDecimalInteger)
      ->needs(weights_opt);
  auto* release_opt =
      verify->add_option("--release", weights.release, "the checkpoint's release (with --weights)")
          ->check(CLI::IsMember(builtin_release_names()))
          ->needs(weights_opt);
  verify
      ->add_option("--release-file", weights.release_file,
                   "the checkpoint's release as a JSON file (with --weights; the built-in "
                   "releases' form)")
      ->excludes(release_opt)
      ->needs(weights_opt);
  verify
      ->add_option("--tokens", weights.tokens,
                   "seeded tokens a row runs, in [1, 64] (default 2 with --weights; with a "
                   "config, its residual.tokens, engram.tokens and model.prompt_tokens)")
      ->check(kDecimalInteger & CLI::Range(1, 64));
  int jobs = 2;
  verify
      ->add_option("--jobs", jobs,
                   "emu: host threads running rows, in [1, 64] (default 2; the rows and their "
                   "results do not depend on it; each row's launches run on it and its "
                   "--block-workers; N rows at once can need N times one row's memory; cuda: "
                   "always 1)")
      ->check(kDecimalInteger & CLI::Range(1, 64));
  verify->callback([&] {
    if (config_opt->count() > 0 && config.empty()) throw_bad_input("--config: an empty path");
    if (weights_opt->count() > 0 && weights.dir.empty())
      throw_bad_input("--weights: an empty path");
    code = cmd_verify(model, config, json, components, vflags, weights, jobs, execute, out);
  });

  auto* golden = app.add_subcommand("golden", "golden cases: list, check, regen");
  golden->require_subcommand(1);
  // Relative to the working directory (run from a checkout's root, the shipped cases), never a
  // path fixed at build time: regen must not rewrite another tree's cases.
  std::string dir = "golden/cases";
  auto add_dir = [&](CLI::App* cmd) {
    cmd->add_option("--dir", dir,
                    "directory of case manifests (default: golden/cases under the working "
                    "directory)");
  };
  auto* list = golden->add_subcommand("list", "list the cases");
  add_dir(list);
  list->callback([&] { code = cmd_golden_list(dir, out); });
  auto* check = golden->add_subcommand("check", "check reference and optimized against the cases");
  std::vector<std::string> only;
  BackendFlags gflags;
  check->add_option("cases", only, "case names (default: all)");
  gflags.add_to(*check);
  add_dir(check);
  check->callback([&] { code = cmd_golden_check(dir, only, gflags, execute, out); });
  auto* regen = golden->add_subcommand("regen", "regenerate the cases (atomically)");
  bool accept = false;
  regen->add_flag("--accept", accept, "replace cases whose expectations changed");
  std::vector<std::string> regen_only;
  regen->add_option("cases", regen_only, "case names (default: all)");
  add_dir(regen);
  regen->callback([&] { code = cmd_golden_regen(dir, accept, regen_only, execute, out); });

  auto* traffic = app.add_subcommand("traffic", "memory-traffic report: baseline vs optimized");
  TrafficFlags tflags;
  tflags.add_to(*traffic);
  traffic->callback([&] { code = cmd_traffic(tflags, execute, out); });

  auto* info = app.add_subcommand("info", "build, backends and device");
  info->callback([&] { code = cmd_info(out); });

  try {
    check_command_words(app, argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    out << app.help();
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) {
      err << "tandem: " << e.what() << " (tandem --help for usage)\n";
      return static_cast<int>(ExitCode::bad_input);
    }
    app.exit(e, out, err);
  } catch (const BadInput& e) {
    err << "tandem: error: " << e.what() << "\n";
    return static_cast<int>(ExitCode::bad_input);
  } catch (const std::filesystem::filesystem_error& e) {  // a path the user gave us
    err << "tandem: error: " << e.what() << "\n";
    return static_cast<int>(ExitCode::bad_input);
  } catch (const KernelFault& e) {
    err << "tandem: verification failed: " << e.what() << "\n";
    return static_cast<int>(ExitCode::verification_failed);
  } catch (const std::bad_alloc&) {  // the run asked more than this machine (or ulimit) gives
    err << "tandem: error: out of memory: lower the config's sizes, --jobs or --block-workers "
           "(each host thread holds its blocks' fiber stacks)\n";
    return static_cast<int>(ExitCode::bad_input);
  } catch (const std::exception& e) {
    if (const auto* s = dynamic_cast<const std::system_error*>(&e);
        s && s->code() == std::errc::resource_unavailable_try_again) {  // a thread past the limit
      err << "tandem: error: cannot start another host thread (" << e.what()
          << "): lower --jobs or --block-workers\n";
      return static_cast<int>(ExitCode::bad_input);
    }
    err << "tandem: internal error: " << e.what() << "\n";
    return static_cast<int>(ExitCode::internal);
  }
  // A report nobody received is not a success (e.g. stdout on a full disk).
  if (!out.flush()) {
    err << "tandem: error: cannot write the output (standard output closed or device full)\n";
    return static_cast<int>(ExitCode::bad_input);
  }
  return code;
}

}  // namespace tandem::app
