#pragma once
// `tandem verify`: every component of a model, reference vs optimized, side by side.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cases/case.hpp"
#include "core/model_config.hpp"

namespace tandem::app {

using ::tandem::VerifyRow;

// A row to run and the component it belongs to.
struct ComponentJob {
  std::string component;
  VerifyJob job;
};
// The rows of `jobs`, in order, run by `workers` host threads taking the next job as they come
// free (the emulator runs launches from several host threads at once), those that start first
// (VerifyJob::starts_first) before the others. An exception other than a row's KernelFault (bad
// input, an internal error) is rethrown: the first in job order, after every worker has stopped.
std::vector<VerifyRow> run_jobs(const std::vector<ComponentJob>& jobs, const RunOptions& opt,
                                bool progress, int workers);

// The components `tandem verify --component` selects (the registry's names, in verify order).
std::vector<std::string> verify_components();
// Every component's rows, or only those of `components` (names from verify_components()).
std::vector<VerifyRow> verify_model(const ModelConfig& model, const RunOptions& opt, bool progress,
                                    const std::vector<std::string>& components = {});
// The rows whose sizes follow the config (RowSizes::config), every component's: what the
// specificity campaign runs on each config it draws (the fixed cases' kernels are swept by their
// own properties, which draw tokens, seeds and block sizes too).
std::vector<VerifyRow> verify_config_sized_rows(const ModelConfig& model, const RunOptions& opt);
// Each named component's rows on its own reading of a config (its sections and their agreement:
// parse_model_config with the component's sections), in verify order, run by `workers` host
// threads (the rows' order and results do not depend on it; emulator launches of several rows
// run at once).
using ComponentConfigs = std::vector<std::pair<std::string, ModelConfig>>;
std::vector<VerifyRow> verify_model(const ComponentConfigs& configs, const RunOptions& opt,
                                    bool progress, int workers = 1);
// The components a verify runs on a config: those asked for (every one if none), each on its
// own reading of the config (its sections, validated with their agreement). A section bad on
// its own is bad input. An asked-for component without its sections, or whose sections do not
// agree or exceed what it runs when joined, is bad input; unasked ones are listed as not run,
// with the reason (V4.1-Flash's end-to-end model: its Engram layers past its blocks).
struct ConfigComponents {
  ComponentConfigs run;
  std::vector<std::string> missing_sections;  // components
  std::vector<std::string> refused;           // "component: the reason"
};
ConfigComponents components_of_config(const nlohmann::json& j, const std::string& source,
                                      const std::vector<std::string>& asked);
// The rows of the components that run on released weights (Component::checkpoint_rows), on one
// layer of a checkpoint (`tandem verify --weights DIR --layer L`).
std::vector<VerifyRow> verify_checkpoint(const CheckpointLayer& layer, const RunOptions& opt,
                                         bool progress,
                                         const std::vector<std::string>& components = {},
                                         int workers = 1);
// Runs one row: a KernelFault (a kernel's output the harness could not use) makes a failing row
// of `component`/`label` naming the faulty tensor, so the other rows still run.
VerifyRow run_row(const std::string& component, const std::string& label, const RunOptions& opt,
                  const std::function<VerifyRow()>& row);
std::string render_table(const std::vector<VerifyRow>& rows);
// `model`: what the rows ran on (a model's name, or a checkpoint layer's description);
// `not_run`: the components the config held but did not run, each "component: why".
nlohmann::json to_json(const std::vector<VerifyRow>& rows, const std::string& model,
                       const std::vector<std::string>& not_run = {});

}  // namespace tandem::app
