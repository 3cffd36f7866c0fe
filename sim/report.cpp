// Report outputs: terminal table, JSON, CSV, and gnuplot plots of a context sweep.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

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

// Runs gnuplot on `script`; the plots it writes are named in `outputs` (written to .tmp first).
void run_gnuplot(const std::string& script, const std::filesystem::path& dir) {
  const auto script_path = dir / fmt::format(".plot.{}.gp", ::getpid());
  write_file_atomic(script_path, std::string_view(script));
  const std::string cmd = fmt::format("gnuplot '{}' 2>&1", script_path.string());
  const int rc = std::system(cmd.c_str());
  std::filesystem::remove(script_path);
  if (rc != 0)
    throw std::runtime_error("gnuplot failed or is missing (ci/bootstrap installs gnuplot-nox)");
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
                      {"kv_bytes_with", v.tokens_with * r.preset.kv_bytes_per_token}});
  return {
      {"preset", r.preset.name},
      {"preset_source", r.preset.source},
      {"workload",
       {{"batch", r.workload.batch},
        {"context", r.workload.context},
        {"acceptance", r.workload.acceptance},
        {"confidence", r.workload.confidence},
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
}

std::string to_table(const Report& r) {
  std::string s = fmt::format(
      "tandem traffic: preset {} | batch {} | context {} | load {} (K = {}, E = {:.3f})\n",
      r.preset.name, r.workload.batch, r.workload.context, r.workload.high_load ? "high" : "low",
      r.verify_budget, r.expected_emitted);
  s += table_section("per prefill token", r.prefill);
  s += table_section("per generated token", r.decode);
  if (r.preset.engram_layers)
    s += fmt::format(
        "engram prefetch: {:.3g} GB/s needed during the first block ({:.3g} ms); "
        "host link {:.3g} GB/s: {}\n",
        r.engram_prefetch_needed_GBps, r.first_block_ms, r.preset.host_link_GBps,
        r.engram_prefetch_hides ? "hidden" : "NOT hidden");
  for (const auto& v : r.vision)
    s += fmt::format(
        "image {}x{} px: {}x{} patches, {} visual tokens without unshuffle, {} with "
        "({} in the sequence), KV {} -> {}\n",
        v.input.width, v.input.height, v.grid_w, v.grid_h, v.tokens_without, v.tokens_with,
        v.sequence_tokens, human(v.tokens_without * r.preset.kv_bytes_per_token),
        human(v.tokens_with * r.preset.kv_bytes_per_token));
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

void write_outputs(const Report& r, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_bad_input("--out {}: cannot create: {}", dir.string(), ec.message());
  write_file_atomic(dir / "report.json", std::string_view(to_json(r).dump(2) + "\n"));
  write_file_atomic(dir / "report.csv", std::string_view(to_csv(r)));
  // Sweep the context from 1K to 1M tokens: bytes per generated token by component.
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
  write_file_atomic(dir / "sweep.csv", std::string_view(sweep));
  const int n = static_cast<int>(std::count_if(r.decode.begin(), r.decode.end(),
                                               [](const ComponentBytes& c) { return c.in_total; }));
  std::string script = fmt::format(
      "set datafile separator ','\nset key autotitle columnhead left top\n"
      "set logscale x 2\nset format x '%.0s%c'\nset rmargin 5\nset xlabel 'context (tokens)'\nset "
      "grid\n"
      "set style fill solid 0.6 border -1\n");
  std::string stacked = "plot ";
  for (int i = n; i >= 1; --i) {  // cumulative areas, largest first so each stays visible
    std::string sum;
    for (int k = 2; k <= i + 1; ++k) sum += fmt::format("{}${}", k > 2 ? "+" : "", k);
    stacked += fmt::format("'{}' using 1:({}) with filledcurves x1 title columnhead({}), ",
                           (dir / "sweep.csv").string(), sum, i + 1);
  }
  stacked += fmt::format("'{}' using 1:{} with lines lw 2 dt 2 title 'baseline total'\n",
                         (dir / "sweep.csv").string(), n + 2);
  for (const char* term : {"svg size 900,520", "png size 900,520"}) {
    const std::string ext = std::string(term).substr(0, 3);
    script += fmt::format(
        "set terminal {}\nset output '{}'\nset title 'bytes per generated token, {} (optimized, "
        "stacked)'\nset ylabel 'bytes'\n{}",
        term, (dir / ("traffic_stacked.tmp." + ext)).string(), r.preset.name, stacked);
    script += fmt::format(
        "set output '{}'\nset title 'savings: baseline / optimized bytes per generated token'\n"
        "set ylabel 'x'\nplot '{}' using 1:{} with linespoints lw 2 title 'saving'\n",
        (dir / ("traffic_savings.tmp." + ext)).string(), (dir / "sweep.csv").string(), n + 4);
  }
  script += "unset output\n";
  run_gnuplot(script, dir);
  for (const char* name : {"traffic_stacked", "traffic_savings"})
    for (const char* ext : {"svg", "png"})
      std::filesystem::rename(dir / fmt::format("{}.tmp.{}", name, ext),
                              dir / fmt::format("{}.{}", name, ext));
}

}  // namespace tandem::sim
