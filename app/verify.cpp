#include "app/verify.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

#include "core/error.hpp"
#include "optimized/emu/hazard.hpp"

namespace tandem::app {

std::vector<std::string> verify_components() {
  std::vector<std::string> names;
  for (const Component& c : registry()) names.push_back(c.name);
  return names;
}

namespace {

// Every selected component's jobs (`rows_of` its rows, none when it has no such rows).
template <class RowsOf>
std::vector<ComponentJob> select_jobs(const std::vector<std::string>& components, RowsOf rows_of) {
  std::vector<ComponentJob> jobs;
  for (const Component& c : registry()) {
    if (!components.empty() &&
        std::find(components.begin(), components.end(), c.name) == components.end())
      continue;
    for (VerifyJob& j : rows_of(c)) jobs.push_back({c.name, std::move(j)});
  }
  return jobs;
}

}  // namespace

std::vector<VerifyRow> run_jobs(const std::vector<ComponentJob>& jobs, const RunOptions& opt,
                                bool progress, int workers) {
  std::vector<VerifyRow> rows(jobs.size());
  std::vector<std::exception_ptr> errors(jobs.size());
  std::vector<size_t> started(jobs.size());
  std::iota(started.begin(), started.end(), size_t{0});
  std::stable_partition(started.begin(), started.end(),
                        [&](size_t i) { return jobs[i].job.starts_first; });
  std::atomic<size_t> next{0};
  std::mutex print;
  auto work = [&] {
    for (size_t k = next++; k < jobs.size(); k = next++) {
      const size_t i = started[k];
      const ComponentJob& j = jobs[i];
      if (progress) {
        const std::lock_guard lock(print);
        std::fprintf(stderr, "\r[%zu/%zu] %-50.50s", k + 1, jobs.size(), j.job.label.c_str());
      }
      try {
        rows[i] = run_row(j.component, j.job.label, opt, j.job.run);
      } catch (...) {
        errors[i] = std::current_exception();
        next = jobs.size();  // the others stop at their next row
      }
    }
  };
  // On a GPU rows share one device, its synchronisations and its sticky errors: one thread.
  if (opt.backend == Backend::cuda) workers = 1;
  {
    std::vector<std::jthread> threads;
    for (int w = 1; w < std::min<int>(workers, int(jobs.size())); ++w) threads.emplace_back(work);
    work();
  }
  if (progress) std::fprintf(stderr, "\r%60s\r", "");
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return rows;
}

std::vector<VerifyRow> verify_model(const ModelConfig& model, const RunOptions& opt, bool progress,
                                    const std::vector<std::string>& components) {
  return run_jobs(
      select_jobs(components, [&](const Component& c) { return c.verify_rows(model, opt); }), opt,
      progress, 1);
}

std::vector<VerifyRow> verify_config_sized_rows(const ModelConfig& model, const RunOptions& opt) {
  return run_jobs(select_jobs({},
                              [&](const Component& c) {
                                std::vector<VerifyJob> jobs = c.verify_rows(model, opt);
                                std::erase_if(jobs, [](const VerifyJob& j) {
                                  return j.sizes == RowSizes::fixed;
                                });
                                return jobs;
                              }),
                  opt, false, 1);
}

std::vector<VerifyRow> verify_model(const ComponentConfigs& configs, const RunOptions& opt,
                                    bool progress, int workers) {
  std::vector<std::string> names;
  for (const auto& [name, model] : configs) names.push_back(name);
  return run_jobs(select_jobs(names,
                              [&](const Component& c) {
                                const auto it = std::find_if(
                                    configs.begin(), configs.end(),
                                    [&](const auto& nc) { return nc.first == c.name; });
                                return c.verify_rows(it->second, opt);
                              }),
                  opt, progress, workers);
}

std::vector<VerifyRow> verify_checkpoint(const CheckpointLayer& layer, const RunOptions& opt,
                                         bool progress, const std::vector<std::string>& components,
                                         int workers) {
  const std::vector<ComponentJob> jobs = select_jobs(components, [&](const Component& c) {
    return c.checkpoint_rows ? c.checkpoint_rows(layer, opt) : std::vector<VerifyJob>{};
  });
  if (jobs.empty())  // passing on nothing would be a false green
    throw_bad_input("--component: none of those runs on released weights (--weights)");
  return run_jobs(jobs, opt, progress, workers);
}

ConfigComponents components_of_config(const nlohmann::json& j, const std::string& source,
                                      const std::vector<std::string>& asked) {
  const std::vector<std::string> present = model_sections_of(j);
  auto has = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  ConfigComponents c;
  for (const std::string& s : present) parse_model_config(j, source, {s});  // each on its own
  for (const Component& comp : registry()) {
    if (!asked.empty() && !has(asked, comp.name)) continue;
    const auto missing = std::find_if(comp.sections.begin(), comp.sections.end(),
                                      [&](const std::string& s) { return !has(present, s); });
    if (missing != comp.sections.end()) {
      if (!asked.empty())
        throw_bad_input("--component {}: {} has no '{}' section (the component reads {})",
                        comp.name, source, *missing, fmt::join(comp.sections, ", "));
      c.missing_sections.push_back(comp.name);
      continue;
    }
    try {
      c.run.emplace_back(comp.name, parse_model_config(j, source, comp.sections));
    } catch (const BadInput& e) {
      if (!asked.empty()) throw;
      c.refused.push_back(fmt::format("{}: {}", comp.name, e.what()));
    }
  }
  if (c.run.empty())  // passing on nothing would be a false green
    throw_bad_input("{}: no component runs on its sections ({}){}", source,
                    fmt::join(present, ", "),
                    c.refused.empty() ? "" : fmt::format("; {}", fmt::join(c.refused, "; ")));
  return c;
}

VerifyRow run_row(const std::string& component, const std::string& label, const RunOptions& opt,
                  const std::function<VerifyRow()>& row) {
  const auto start = std::chrono::steady_clock::now();
  VerifyRow r;
  try {
    r = row();
  } catch (const KernelFault& e) {  // a wrong result of the code under test: FAIL, go on
    r = VerifyRow{};
    r.component = component;
    r.name = label;
    r.backend = backend_name(opt.backend);
    r.worst_tensor = r.first_divergence = e.tensor();
    r.detail = e.what();
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::string render_table(const std::vector<VerifyRow>& rows) {
  std::string out = fmt::format("{:<9} {:<42} {:<5} {:<9} {:>10} {:>10} {:>7}  {:<13} {:<28} {}\n",
                                "component", "case", "backend", "worst", "err", "budget", "margin",
                                "schedules", "bytes", "verdict");
  for (const VerifyRow& r : rows) {
    out += fmt::format("{:<9} {:<42} {:<5} {:<9} {:>10.3e} {:>10.3e} {:>6.1f}%  {:<13} {:<28} {}\n",
                       r.component, r.name, r.backend, r.worst_tensor, r.worst_err, r.budget,
                       100 * r.margin, r.schedules.empty() ? "-" : r.schedules,
                       r.bytes.empty() ? "-" : r.bytes,
                       r.pass ? "PASS" : "FAIL (first divergence: " + r.first_divergence + ")");
    if (!r.pass && !r.detail.empty()) out += "  " + r.detail + "\n";
  }
  return out;
}

namespace {

// Per launch: the kernel and its global-memory bytes read and written (all traffic classes).
nlohmann::json launches_json(const LaunchLog& log) {
  nlohmann::json a = nlohmann::json::array();
  for (const LaunchCounts& l : log) {
    uint64_t read = 0, written = 0;
    for (int c = 0; c < kTrafficClasses; ++c) read += l.read[c], written += l.written[c];
    a.push_back({{"kernel", l.kernel}, {"read_bytes", read}, {"written_bytes", written}});
  }
  return a;
}

}  // namespace

nlohmann::json to_json(const std::vector<VerifyRow>& rows, const std::string& model,
                       const std::vector<std::string>& not_run) {
  nlohmann::json cases = nlohmann::json::array();
  bool pass = true;
  for (const VerifyRow& r : rows) {
    pass &= r.pass;
    cases.push_back({{"component", r.component},
                     {"case", r.name},
                     {"backend", r.backend},
                     {"pass", r.pass},
                     {"worst_tensor", r.worst_tensor},
                     {"worst_err", r.worst_err},
                     {"budget", r.budget},
                     {"margin", r.margin},
                     {"first_divergence", r.first_divergence},
                     {"schedules", r.schedules},
                     {"bytes", r.bytes},
                     {"detail", r.detail},
                     {"seconds", r.seconds},
                     {"launches", launches_json(r.launches)}});
    if (!r.acceptance.empty()) {  // what `tandem traffic --acceptance-from` reads
      cases.back()["acceptance_per_position"] = r.acceptance;
      cases.back()["tokens_per_pass"] = r.tokens_per_pass;
    }
  }
  // Whether the emulator's rows also had their shared memory checked for races.
  return {{"model", model},
          {"pass", pass},
          {"shared_memory_hazard_check", emu::hazard_check()},
          {"not_run", not_run},
          {"cases", cases}};
}

}  // namespace tandem::app
