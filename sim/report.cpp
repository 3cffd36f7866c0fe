// Report outputs: terminal table, JSON, CSV, and gnuplot plots of a context sweep.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "sim/traffic.hpp"

namespace tandem::sim {
namespace {

nlohmann::json rows_json(const std::vector<ComponentBytes>& rows) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& c : rows)
    a.push_back({{"component", c.component},
                 {"baseline_bytes", c.baseline},
                 {"optimized_bytes", c.optimized},
                 {"saving", c.saving()},
                 {"in_total", c.in_total},
                 {"note", c.note}});
  return a;
}

ComponentBytes total(const std::vector<ComponentBytes>& rows) {
  ComponentBytes t;
  t.component = "total";
  for (const auto& c : rows)
    if (c.in_total) t.baseline += c.baseline, t.optimized += c.optimized;
  return t;
}

std::string human(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) bytes /= 1000, ++u;
  return fmt::format("{:.3g} {}", bytes, units[u]);
}

std::string table_section(const char* title, std::vector<ComponentBytes> rows) {
  rows.push_back(total(rows));
  std::string s = fmt::format("{}\n  {:<10} {:>12} {:>12} {:>9}  {}\n", title, "component",
                              "baseline", "optimized", "saving", "note");
  for (const auto& c : rows)
    s += fmt::format("  {:<10} {:>12} {:>12} {:>9}  {}\n", c.component, human(c.baseline),
                     human(c.optimized), c.optimized > 0 ? fmt::format("{:.2f}x", c.saving()) : "-",
                     c.note);
  return s;
}

// Runs gnuplot on `script` inside `dir` (its working directory, so the script names only fixed
// relative files): no shell, stdin from /dev/null, gnuplot's own output to our stderr (stdout
// stays clean for --json).
void run_gnuplot(const std::string& script, const std::filesystem::path& dir) {
  write_file_atomic(dir / "plot.gp", std::string_view(script));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  char arg0[] = "gnuplot", arg1[] = "plot.gp";
  char* argv[] = {arg0, arg1, nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0)
    throw std::runtime_error(fmt::format(
        "cannot run gnuplot: {} (ci/bootstrap installs gnuplot-nox)", std::strerror(spawned)));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("gnuplot failed drawing the plots (its messages are above)");
}

}  // namespace

nlohmann::json to_json(const Report& r) {
  nlohmann::json vision = nlohmann::json::array();
  for (const auto& v : r.vision)
    vision.push_back({{"width", v.input.width},
                      {"height", v.input.height},
                      {"grid", {v.grid_w, v.grid_h}},
                      {"tokens_without_unshuffle", v.tokens_without},
                      {"tokens_with_unshuffle", v.tokens_with},
                      {"sequence_tokens", v.sequence_tokens},
                      {"kv_bytes_without", v.tokens_without * r.preset.kv_bytes_per_token},
                      {"kv_bytes_with", v.tokens_with * r.preset.kv_bytes_per_token},
                      {"engram_marker_bytes", v.engram_marker_bytes}});
  nlohmann::json j = {
      {"preset", r.preset.name},
      {"preset_source", r.preset.source},
      {"workload",
       {{"batch", r.workload.batch},
        {"context", r.workload.context},
        {"acceptance", r.workload.acceptance},
        {"confidence", r.workload.confidence},
        {"acceptance_from", r.workload.acceptance_from},
        {"load", r.workload.high_load ? "high" : "low"}}},
      {"dspark", {{"verify_budget", r.verify_budget}, {"expected_emitted", r.expected_emitted}}},
      {"prefill_per_token", rows_json(r.prefill)},
      {"decode_per_generated_token", rows_json(r.decode)},
      {"engram_prefetch",
       {{"needed_GBps", r.engram_prefetch_needed_GBps},
        {"first_block_ms", r.first_block_ms},
        {"host_link_GBps", r.preset.host_link_GBps},
        {"hides", r.engram_prefetch_hides}}},
      {"vision", vision}};
  if (r.kv_sequence) {
    const KvSequenceBytes& k = *r.kv_sequence;
    j["kv_per_sequence"] = {{"compressed", k.compressed}, {"index_keys", k.index_keys},
                            {"window", k.window},         {"states", k.states},
                            {"padding", k.padding},       {"total", k.total()},
                            {"page_size", kKvReportPage}};
  }
  if (!r.kv_decode.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const KvDecodeRead& k : r.kv_decode)
      rows.push_back({{"kind", k.kind},
                      {"layers", k.layers},
                      {"window", k.window},
                      {"selected", k.selected},
                      {"index_scan", k.index_scan},
                      {"states", k.states},
                      {"total", k.total()}});
    j["kv_decode_per_step"] = rows;
  }
  return j;
}

std::string to_table(const Report& r) {
  std::string s = fmt::format(
      "tandem traffic: preset {} | batch {} | context {} | load {} (K = {}, E = {:.3f})\n",
      r.preset.name, r.workload.batch, r.workload.context, r.workload.high_load ? "high" : "low",
      r.verify_budget, r.expected_emitted);
  if (!r.workload.acceptance_from.empty())
    s += fmt::format("DSpark acceptance by draft position {:.3f}: measured in {}\n",
                     fmt::join(r.workload.confidence, " "), r.workload.acceptance_from);
  s += table_section("per prefill token", r.prefill);
  s += table_section("per generated token", r.decode);
  if (r.preset.engram_layers)
    s += fmt::format(
        "engram prefetch: {:.3g} GB/s needed during the first block ({:.3g} ms); "
        "host link {:.3g} GB/s: {}\n",
        r.engram_prefetch_needed_GBps, r.first_block_ms, r.preset.host_link_GBps,
        r.engram_prefetch_hides ? "hidden" : "NOT hidden");
  if (r.kv_sequence) {
    const KvSequenceBytes& k = *r.kv_sequence;
    s += fmt::format(
        "kv cache per sequence of {} tokens: {} (compressed {}, index keys {}, windows {}, "
        "compressor states {}; page padding {} of it, pages of {})\n",
        r.workload.context, human(double(k.total())), human(double(k.compressed)),
        human(double(k.index_keys)), human(double(k.window)), human(double(k.states)),
        human(double(k.padding)), kKvReportPage);
  }
  if (!r.kv_decode.empty()) {
    s += fmt::format("kv read per decode step at context {}, by layer kind:\n", r.workload.context);
    s += fmt::format("  {:<26} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "kind", "layers",
                     "window", "selected", "idx scan", "states", "total");
    for (const KvDecodeRead& k : r.kv_decode)
      s += fmt::format("  {:<26} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}\n", k.kind, k.layers,
                       human(double(k.window)), human(double(k.selected)),
                       human(double(k.index_scan)), human(double(k.states)),
                       human(double(k.total())));
  }
  for (const auto& v : r.vision) {
    s += fmt::format(
        "image {}x{} px: {}x{} patches, {} visual tokens without unshuffle, {} with "
        "({} in the sequence), KV {} -> {}\n",
        v.input.width, v.input.height, v.grid_w, v.grid_h, v.tokens_without, v.tokens_with,
        v.sequence_tokens, human(v.tokens_without * r.preset.kv_bytes_per_token),
        human(v.tokens_with * r.preset.kv_bytes_per_token));
    if (v.engram_marker_bytes > 0)
      s += fmt::format(
          "  engram at its positions: the release fetches the all-pad n-gram's rows, {}; "
          "skipping them (engram.skip_marker_lookups) saves that\n",
          human(v.engram_marker_bytes));
  }
  return s;
}

std::string to_csv(const Report& r) {
  std::string s = "phase,component,baseline_bytes,optimized_bytes,saving\n";
  auto rows = [&](const char* phase, const std::vector<ComponentBytes>& v) {
    for (const auto& c : v)
      s += fmt::format("{},{},{:.6g},{:.6g},{:.6g}\n", phase, c.component, c.baseline, c.optimized,
                       c.saving());
  };
  rows("prefill", r.prefill);
  rows("decode", r.decode);
  return s;
}

std::string gnuplot_string(std::string_view text) {
  std::string q = "\"";
  for (const unsigned char c : text)
    q += std::isalnum(c) || c == ' ' || c == '-' || c == '_' || c == '.' || c == ','
             ? std::string(1, static_cast<char>(c))
             : fmt::format("\\{:03o}", c);
  return q + "\"";
}

namespace {

// Context sweep from 1K to 1M tokens: bytes per generated token by component (CSV).
std::string sweep_csv(const Report& r) {
  std::string sweep = "context";
  for (const auto& c : r.decode)
    if (c.in_total) sweep += "," + c.component;
  sweep += ",baseline_total,optimized_total,saving\n";
  for (int64_t ctx = 1024; ctx <= (int64_t{1} << 20); ctx *= 2) {
    Workload w = r.workload;
    w.context = ctx;
    const Report s = simulate(r.preset, w);
    sweep += std::to_string(ctx);
    for (const auto& c : s.decode)
      if (c.in_total) sweep += fmt::format(",{:.6g}", c.optimized);
    const ComponentBytes t = total(s.decode);
    sweep += fmt::format(",{:.6g},{:.6g},{:.6g}\n", t.baseline, t.optimized, t.saving());
  }
  return sweep;
}

// The gnuplot script drawing sweep.csv into traffic_{stacked,savings}.{svg,png}, all in gnuplot's
// working directory. The one user string (the preset's name) goes through gnuplot_string.
std::string plot_script(const Report& r) {
  const int n = static_cast<int>(std::count_if(r.decode.begin(), r.decode.end(),
                                               [](const ComponentBytes& c) { return c.in_total; }));
  std::string script =
      "set datafile separator ','\nset key autotitle columnhead left top\n"
      "set logscale x 2\nset format x '%.0s%c'\nset rmargin 5\nset xlabel 'context (tokens)'\n"
      "set grid\nset style fill solid 0.6 border -1\n";
  std::string stacked = "plot ";
  for (int i = n; i >= 1; --i) {  // cumulative areas, largest first so each stays visible
    std::string sum;
    for (int k = 2; k <= i + 1; ++k) sum += fmt::format("{}${}", k > 2 ? "+" : "", k);
    stacked += fmt::format("'sweep.csv' using 1:({}) with filledcurves x1 title columnhead({}), ",
                           sum, i + 1);
  }
  stacked +=
      fmt::format("'sweep.csv' using 1:{} with lines lw 2 dt 2 title 'baseline total'\n", n + 2);
  const std::string title =
      gnuplot_string("bytes per generated token, " + r.preset.name + " (optimized, stacked)");
  for (const char* term : {"svg size 900,520", "png size 900,520"}) {
    const std::string ext = std::string(term).substr(0, 3);
    script += fmt::format(
        "set terminal {}\nset output 'traffic_stacked.{}'\nset title {} noenhanced\n"
        "set ylabel 'bytes'\n{}",
        term, ext, title, stacked);
    script += fmt::format(
        "set output 'traffic_savings.{}'\n"
        "set title 'savings: baseline / optimized bytes per generated token'\n"
        "set ylabel 'x'\nplot 'sweep.csv' using 1:{} with linespoints lw 2 title 'saving'\n",
        ext, n + 4);
  }
  return script + "unset output\n";
}

}  // namespace

void write_outputs(const Report& r, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw_bad_input("--out {}: cannot create the directory: {}", dir.string(),
                    ec ? ec.message() : "a file of that name exists");
  remove_stale_temporaries(dir);
  // Everything is made in a private directory; only a complete report moves into `dir`.
  const PrivateTempDir work(dir);
  write_file_atomic(work.path() / "report.json", std::string_view(to_json(r).dump(2) + "\n"));
  write_file_atomic(work.path() / "report.csv", std::string_view(to_csv(r)));
  write_file_atomic(work.path() / "sweep.csv", std::string_view(sweep_csv(r)));
  run_gnuplot(plot_script(r), work.path());
  for (const char* name : kReportFiles) {  // before moving any: each target can be replaced
    const auto st = std::filesystem::symlink_status(dir / name, ec);
    if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
      throw_bad_input("--out {}: {} exists and is not a regular file", dir.string(), name);
  }
  for (const char* name : kReportFiles) {
    std::filesystem::rename(work.path() / name, dir / name, ec);
    if (ec)
      throw_bad_input("--out {}: cannot move {} into place: {}", dir.string(), name, ec.message());
  }
}

}  // namespace tandem::sim
