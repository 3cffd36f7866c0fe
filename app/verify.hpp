#pragma once
// `tandem verify`: every component of a model, reference vs optimized, side by side.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/model_config.hpp"
#include "optimized/backend.hpp"
#include "problem/traffic.hpp"

namespace tandem::app {

struct VerifyRow {
  std::string component, name, backend;
  bool pass = false;
  std::string worst_tensor;  // the tensor with the smallest margin
  double worst_err = 0, budget = 0, margin = 0;
  std::string first_divergence;  // first failing tensor in execution order, or empty
  std::string schedules;         // emu: "3 identical" or the differing schedule
  std::string bytes;             // emu: counted vs designed activation bytes per site
  std::string detail;            // the failure, if any
  LaunchLog launches;            // the optimized run's launches (bytes counted under emu only)
};

// The components `tandem verify --component` selects; every row of one shares its name.
inline const std::vector<std::string> kVerifyComponents = {
    "residual", "engram", "vision", "attention", "moe", "dspark", "model"};
// Every component's rows, or only those of `components` (names from kVerifyComponents).
std::vector<VerifyRow> verify_model(const ModelConfig& model, const RunOptions& opt, bool progress,
                                    const std::vector<std::string>& components = {});
// Runs one row: a KernelFault (a kernel's output the harness could not use) makes a failing row
// of `component`/`label` naming the faulty tensor, so the other rows still run.
VerifyRow run_row(const std::string& component, const std::string& label, const RunOptions& opt,
                  const std::function<VerifyRow()>& row);
std::string render_table(const std::vector<VerifyRow>& rows);
nlohmann::json to_json(const std::vector<VerifyRow>& rows, const ModelConfig& model);

}  // namespace tandem::app
