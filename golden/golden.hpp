#pragma once
// Golden cases (DESIGN section 7): golden/cases/<component>_<name>.json (manifest) beside
// <...>.safetensors (inputs, and expected outputs computed by the double reference).
#include <filesystem>
#include <string>
#include <vector>

#include "cases/case.hpp"

namespace tandem::golden {

inline constexpr int kFormatVersion = 1;

using ::tandem::CaseReport, ::tandem::CheckedTensor;

// Lists the case manifests in `dir` (sorted).
std::vector<std::filesystem::path> list_cases(const std::filesystem::path& dir);
std::vector<std::string> generator_case_names();

// Checks one case: the double reference against the stored expectations (1e-12 relative to the
// tensor's largest magnitude) and the optimized model on `opt` against the tolerance policy.
// Corrupt or mismatched files are BadInput naming the file and field.
CaseReport check_case(const std::filesystem::path& manifest, const RunOptions& opt);

struct RegenReport {
  std::string name;
  std::vector<std::string> deltas;  // per tensor: "name: max |new-old| = ..., changed/unchanged"
  bool changed = false;             // expectations differ from the files on disk
  bool written = false;
};
// Regenerates every generator case (or those named in `only`; an unknown name is BadInput) into
// `dir`. A case whose expectations changed is only replaced with `accept`; files are written
// atomically.
std::vector<RegenReport> regen_cases(const std::filesystem::path& dir, bool accept,
                                     const std::vector<std::string>& only = {});

}  // namespace tandem::golden
