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

// The components `tandem verify --component` selects (the registry's names, in verify order).
std::vector<std::string> verify_components();
// Every component's rows, or only those of `components` (names from verify_components()).
std::vector<VerifyRow> verify_model(const ModelConfig& model, const RunOptions& opt, bool progress,
                                    const std::vector<std::string>& components = {});
// The rows of the components that run on released weights (Component::checkpoint_rows), on one
// layer of a checkpoint (`tandem verify --weights DIR --layer L`).
std::vector<VerifyRow> verify_checkpoint(const CheckpointLayer& layer, const RunOptions& opt,
                                         bool progress,
                                         const std::vector<std::string>& components = {});
// Runs one row: a KernelFault (a kernel's output the harness could not use) makes a failing row
// of `component`/`label` naming the faulty tensor, so the other rows still run.
VerifyRow run_row(const std::string& component, const std::string& label, const RunOptions& opt,
                  const std::function<VerifyRow()>& row);
std::string render_table(const std::vector<VerifyRow>& rows);
// `model`: what the rows ran on (a model's name, or a checkpoint layer's description).
nlohmann::json to_json(const std::vector<VerifyRow>& rows, const std::string& model);

}  // namespace tandem::app
