#include "app/commands.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <ostream>

#include "app/verify.hpp"
#include "core/error.hpp"
#include "core/git_commit.hpp"
#include "golden/golden.hpp"
#include "sim/traffic.hpp"

#ifndef TANDEM_SOURCE_DIR
#define TANDEM_SOURCE_DIR "."
#endif

namespace tandem::app {
namespace {

struct BackendFlags {
  std::string backend = "auto";
  std::string schedule = "in-order";
  int block_threads = 128;

  void add_to(CLI::App& cmd) {
    cmd.add_option("--backend", backend, "auto (cuda if a GPU is found, else emu), emu or cuda")
        ->check(CLI::IsMember({"auto", "emu", "cuda"}));
    cmd.add_option("--schedule", schedule, "emu resume order: in-order, reversed, shuffled:SEED");
    cmd.add_option("--block-threads", block_threads, "threads per block (multiple of 32)");
  }
  RunOptions resolve() const {
    RunOptions o;
    o.backend = backend == "auto"   ? best_backend()
                : backend == "cuda" ? Backend::cuda
                                    : Backend::emu;
    if (o.backend == Backend::cuda && !cuda_status().available)
      throw_bad_input("--backend cuda: {}", cuda_status().detail);
    o.schedule = emu::parse_schedule(schedule);
    o.block_threads = block_threads;
    return o;
  }
};

int cmd_verify(const std::string& model_name, const std::string& config_path, bool json,
               const std::vector<std::string>& components, const BackendFlags& flags,
               std::ostream& out) {
  const ModelConfig model =
      config_path.empty() ? builtin_model(model_name) : load_model_config(config_path);
  const RunOptions opt = flags.resolve();
  const auto rows = verify_model(model, opt, !json && isatty(STDERR_FILENO), components);
  const auto j = to_json(rows, model);
  if (json) {
    out << j.dump(2) << "\n";
  } else {
    out << fmt::format("tandem verify: model {} on {}\n", model.name, backend_name(opt.backend))
        << render_table(rows) << (j["pass"].get<bool>() ? "all cases PASS\n" : "FAILED\n");
  }
  return j["pass"].get<bool>() ? 0 : 1;
}

int cmd_golden_list(const std::string& dir, std::ostream& out) {
  for (const auto& p : golden::list_cases(dir)) out << p.stem().string() << "\n";
  return 0;
}

int cmd_golden_check(const std::string& dir, const std::vector<std::string>& only,
                     const BackendFlags& flags, std::ostream& out) {
  const RunOptions opt = flags.resolve();
  bool all = true;
  int checked = 0;
  for (const auto& p : golden::list_cases(dir)) {
    if (!only.empty() && std::find(only.begin(), only.end(), p.stem().string()) == only.end())
      continue;
    const golden::CaseReport r = golden::check_case(p, opt);
    ++checked;
    out << fmt::format("{:<24} {} ({} tensors, {})\n", r.name, r.pass() ? "PASS" : "FAIL",
                       r.tensors.size(), backend_name(opt.backend));
    for (const auto& t : r.tensors)
      if (!t.pass) out << fmt::format("  {} [{}]: {}\n", t.name, t.rule, t.detail);
    all &= r.pass();
  }
  if (checked == 0) throw_bad_input("{}: no golden cases matched", dir);
  return all ? 0 : 1;
}

int cmd_golden_regen(const std::string& dir, bool accept, const std::vector<std::string>& only,
                     std::ostream& out) {
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

struct TrafficFlags {
  std::string preset = "v4.1-flash", preset_file, out_dir, load = "high", act_dtype;
  std::vector<std::string> images;
  std::vector<double> confidence;
  sim::Workload w;
  bool json = false;

  void add_to(CLI::App& cmd) {
    cmd.add_option("--preset", preset, "built-in preset: tiny, v4-flash, v4-pro, v4.1-flash")
        ->capture_default_str();
    cmd.add_option("--preset-file", preset_file, "preset JSON file (instead of --preset)");
    cmd.add_option("--batch", w.batch, "concurrent requests")->capture_default_str();
    cmd.add_option("--context", w.context, "context length in tokens")->capture_default_str();
    cmd.add_option("--image", images, "an image in the prompt, WxH pixels (repeatable)");
    cmd.add_option("--acceptance", w.acceptance, "DSpark i.i.d. acceptance per drafted token")
        ->capture_default_str();
    cmd.add_option("--confidence", confidence, "DSpark per-position confidences (overrides)")
        ->delimiter(',');
    cmd.add_option("--load", load, "high (verify 1 per request) or low (verify all gamma)")
        ->check(CLI::IsMember({"high", "low"}));
    cmd.add_option("--act-dtype", act_dtype, "residual storage dtype (default: the preset's)")
        ->check(CLI::IsMember({"bf16", "f32"}));
    cmd.add_flag("--json", json, "print JSON instead of a table");
    cmd.add_option("--out", out_dir, "write report.json, report.csv, sweep.csv and SVG/PNG plots");
  }

  sim::Workload workload() const {
    sim::Workload r = w;
    r.high_load = load == "high";
    r.confidence = confidence;
    for (const std::string& img : images) {
      int width = 0, height = 0;
      char x = 0, extra = 0;
      if (std::sscanf(img.c_str(), "%d%c%d%c", &width, &x, &height, &extra) != 3 || x != 'x')
        throw_bad_input("--image: expected WxH (e.g. 1920x1080), got '{}'", img);
      r.images.push_back({width, height});
    }
    return r;
  }
};

int cmd_traffic(const TrafficFlags& f, std::ostream& out) {
  sim::Preset p =
      f.preset_file.empty() ? sim::builtin_preset(f.preset) : sim::load_preset(f.preset_file);
  if (!f.act_dtype.empty()) p.act_bytes = f.act_dtype == "f32" ? 4 : 2;
  const sim::Report r = sim::simulate(p, f.workload());
  out << (f.json ? to_json(r).dump(2) + "\n" : to_table(r));
  if (!f.out_dir.empty()) {
    sim::write_outputs(r, f.out_dir);
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
  return 0;
}

}  // namespace

int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
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
  verify->add_option("--model", model, "built-in model name");
  verify->add_option("--config", config, "model config JSON file (instead of --model)");
  verify->add_flag("--json", json, "print JSON instead of a table");
  std::vector<std::string> components;
  verify->add_option("--component", components, "only this component's rows (repeatable)")
      ->check(CLI::IsMember(kVerifyComponents));
  vflags.add_to(*verify);
  verify->callback([&] { code = cmd_verify(model, config, json, components, vflags, out); });

  auto* golden = app.add_subcommand("golden", "golden cases: list, check, regen");
  golden->require_subcommand(1);
  std::string dir = std::string(TANDEM_SOURCE_DIR) + "/golden/cases";
  auto add_dir = [&](CLI::App* cmd) {
    cmd->add_option("--dir", dir, "directory of case manifests")->capture_default_str();
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
  check->callback([&] { code = cmd_golden_check(dir, only, gflags, out); });
  auto* regen = golden->add_subcommand("regen", "regenerate the cases (atomically)");
  bool accept = false;
  regen->add_flag("--accept", accept, "replace cases whose expectations changed");
  std::vector<std::string> regen_only;
  regen->add_option("cases", regen_only, "case names (default: all)");
  add_dir(regen);
  regen->callback([&] { code = cmd_golden_regen(dir, accept, regen_only, out); });

  auto* traffic = app.add_subcommand("traffic", "memory-traffic report: baseline vs optimized");
  TrafficFlags tflags;
  tflags.add_to(*traffic);
  traffic->callback([&] { code = cmd_traffic(tflags, out); });

  auto* info = app.add_subcommand("info", "build, backends and device");
  info->callback([&] { code = cmd_info(out); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    out << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      app.exit(e, out, err);
      return 0;
    }
    err << "tandem: " << e.what() << "\n"
        << "run 'tandem --help' for usage\n";
    return static_cast<int>(ExitCode::bad_input);
  } catch (const BadInput& e) {
    err << "tandem: error: " << e.what() << "\n";
    return static_cast<int>(ExitCode::bad_input);
  } catch (const std::exception& e) {
    err << "tandem: internal error: " << e.what() << "\n";
    return static_cast<int>(ExitCode::internal);
  }
  return code;
}

}  // namespace tandem::app
