#pragma once
// What a component's cases are to the harness (in the spirit of ggml's test_case): a verify row
// runs the reference and the kernels side by side on a model config and reports the comparison,
// the schedule identity and the simulator's bytes; a golden case builds its blob from a seed and
// checks a stored one. cases/registry lists every component once; `tandem verify` and
// `tandem golden` (so also the golden fuzz target) iterate it. Each component's property tests,
// benchmark and fuzz target are built per stem of CMakeLists.txt's tandem_component() calls,
// which name the same components (cases/registry.cpp does not compile otherwise).
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cases/tensor_check.hpp"
#include "core/checkpoint.hpp"
#include "core/model_config.hpp"
#include "core/safetensors.hpp"
#include "optimized/backend.hpp"
#include "problem/traffic.hpp"

namespace tandem {

// ---------------------------------------------------------------- verify rows
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
  // Decode rows: the drafts' measured acceptance per position (given the earlier ones accepted)
  // and the tokens a request's pass emitted on average (empty / 0 elsewhere).
  std::vector<double> acceptance;
  double tokens_per_pass = 0;
  double seconds = 0;  // the row's wall-clock time (rows run side by side share the cores)
};

// Where a verify row's sizes come from: the config's sections, or the row's own fixed case (a
// release format at its own sizes, taking only the config's tokens and seed).
enum class RowSizes { config, fixed };

// One row of `tandem verify`: its label for progress and faults, and how it runs.
struct VerifyJob {
  std::string label;
  std::function<VerifyRow()> run;
  RowSizes sizes = RowSizes::config;
  // Started before the rows without it (the rows keep their order in the output): the longest
  // rows, so that with --jobs N the others fill the other workers around them.
  bool starts_first = false;
};

// ---------------------------------------------------------------- golden cases
// What a generator entry produces: the manifest's config, the blob, and each output's rule.
struct BuiltCase {
  nlohmann::json config;
  Safetensors blob;
  std::vector<std::pair<std::string, std::string>> outputs;  // name -> "exact" | "tolerance"
};

// One generator entry: `tandem golden regen` writes exactly these.
struct GoldenSpec {
  std::string name;
  uint64_t seed;
  std::function<BuiltCase(uint64_t seed)> build;
};

// A case as read from its manifest and blob (golden/ parses and validates the files).
struct LoadedCase {
  std::string name, component;
  nlohmann::json manifest;
  std::vector<std::pair<std::string, std::string>> outputs;
  Safetensors blob;
  std::string blob_source;
};

struct CheckedTensor {
  std::string name;
  std::string rule;  // "tolerance" (section 4) or "ref-1e-12" (double reference)
  bool pass = false;
  std::string detail;
};

struct CaseReport {
  std::string name;
  std::vector<CheckedTensor> tensors;
  bool pass() const;
};

// A file the component's golden cases share (written once per directory by regen).
struct SharedFile {
  std::string name, bytes;
};

// One layer of released weights and the test's size (`tandem verify --weights DIR --layer L`):
// the layer's tensors as the checkpoint holds them (core/checkpoint.hpp), the release's shapes
// and scalars, seeded activations of `tokens` tokens.
struct CheckpointLayer {
  LayerTensors tensors;
  ReleaseConfig release;
  int64_t tokens = 2;
  uint64_t seed = 0;
};

// ---------------------------------------------------------------- a component
struct Component {
  std::string name;  // as manifests, `--component` and the rows name it
  // The config sections its verify rows read (core/model_config.hpp kModelSections): a config
  // without one of them does not run this component.
  std::vector<std::string> sections;
  // The rows of `tandem verify` for a model config.
  std::function<std::vector<VerifyJob>(const ModelConfig&, const RunOptions&)> verify_rows;
  std::function<std::vector<GoldenSpec>()> golden_specs;
  // Checks a stored case: the double reference against its expectations, the kernels on `opt`
  // against the tolerance policy. Corrupt or mismatched files are BadInput naming file and field.
  std::function<CaseReport(const LoadedCase&, const RunOptions&)> check;
  std::function<std::vector<SharedFile>()> shared_files = [] { return std::vector<SharedFile>{}; };
  // Rows on one layer of released weights, for the components whose tensors a checkpoint holds;
  // unset for the others.
  std::function<std::vector<VerifyJob>(const CheckpointLayer&, const RunOptions&)> checkpoint_rows;
  // The stored tensors of its cases that may hold +-inf (never NaN): an input whose infinities
  // mean something (sparse_attn's -inf sinks: no sink) and an expectation that holds them (its
  // +inf lse of a row with nothing valid). Every other stored float must be finite.
  std::vector<std::string> infinite_tensors;
};

// Every component, in verify order (cases/registry.cpp).
const std::vector<Component>& registry();
// The component named `name`, or nullptr.
const Component* find_component(const std::string& name);

}  // namespace tandem
