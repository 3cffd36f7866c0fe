#pragma once
// What the components' cases share: reading a stored case's config and tensors, checking the
// double reference against stored expectations (1e-12), folding tolerance checks into a golden
// report or a verify row, the schedule identity and the simulator's verdict.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "cases/case.hpp"
#include "core/json_fields.hpp"
#include "optimized/emu/schedule.hpp"
#include "problem/dtype.hpp"

namespace tandem {

// ---------------------------------------------------------------- golden checks
// The config's "act" field: f32 or bf16 (BadInput naming the field otherwise).
ActDType parse_act(const JsonFields& f);

// Any stored tensor as doubles (F64, F32, I64, I32), for deltas.
std::vector<double> as_doubles(const StTensor& t);

// Largest |a - b| and whether it is within 1e-12 of b's largest magnitude. The double reference
// is deterministic; 1e-12 leaves room only for compilers contracting or reordering its sums.
struct Delta {
  double max_abs = 0, scale = 0;
  bool within() const { return max_abs <= 1e-12 * scale; }
};
Delta delta(const std::vector<double>& a, const std::vector<double>& b);
// A tensor's shape and values as doubles.
struct Values {
  Shape shape;
  std::vector<double> v;
};
template <class T>
Values doubles(const Tensor<T>& t) {
  return {t.shape, {t.data.begin(), t.data.end()}};
}

// The reference recomputed now against the stored expectation, which must have its shape.
CheckedTensor reference_check(const std::string& name, const Values& now, const StTensor& stored);

// A stored tensor of the expected shape (BadInput naming the file and tensor otherwise).
template <class T>
Tensor<T> get_shaped(const LoadedCase& c, const std::string& name, const Shape& shape) {
  Tensor<T> t = c.blob.get_as<T>(name, c.blob_source);
  if (t.shape != shape)
    throw_bad_input("{}: tensor '{}' has shape {}, expected {}", c.blob_source, name,
                    fmt::join(t.shape, "x"), fmt::join(shape, "x"));
  return t;
}

// A stored tensor by name into `t`, in t's element type (the reader of for_each_tensor).
template <class T>
void load_tensor(const LoadedCase& c, const char* name, Tensor<T>& t) {
  t = c.blob.get_as<T>(name, c.blob_source);
}

// A discrete output of a golden case: bit-exact, with `who` (reference or kernel) in the detail.
template <class T>
CheckedTensor exact_output(const std::string& name, const std::string& who, const Tensor<T>& want,
                           const Tensor<T>& got) {
  const TensorCheck t = exact_check(name, want, got);
  return {name, "exact", t.result.pass,
          who + ": " + (t.result.pass ? "bit-exact" : t.result.summary())};
}

// The optimized result against the stored truth under the tolerance policy (baseline recomputed).
void add_checks(CaseReport& report, const std::vector<TensorCheck>& checks,
                const std::vector<std::pair<std::string, std::string>>& rules);

// A kernel case with one floating output: the reference recomputed (1e-12 of the stored truth),
// then the optimized output against the stored truth (baseline recomputed).
template <class Reference, class Outputs, class Compare>
CaseReport check_one_output(const LoadedCase& c, const std::string& output, Reference ref,
                            const Outputs& out, ActDType act, Compare compare) {
  const std::string key = "expected." + output;
  CaseReport report{c.name, {}};
  report.tensors.push_back(
      reference_check(output, doubles(ref.truth), c.blob.get(key, c.blob_source)));
  ref.truth = c.blob.get_as<double>(key, c.blob_source);
  add_checks(report, compare(ref, out, act), c.outputs);
  return report;
}

// Refuses stored shapes that multiply to more than kMaxWork multiply-adds per run (the blob's own
// size bound does not bound the work).
void within_work(const LoadedCase& c, const char* tensors, double work);

// ---------------------------------------------------------------- verify rows
// Folds tensor checks into a row: the first failing tensor, and the smallest margin.
void fold_checks(VerifyRow& row, const std::vector<TensorCheck>& checks);

// Reruns under every emulator schedule; the outputs must be bit-identical (DESIGN 3).
template <class Run, class Same>
void check_schedules(VerifyRow& row, const RunOptions& opt, Run run, Same same) {
  int identical = 0;
  for (const emu::Schedule& s : emu::test_schedules()) {
    RunOptions o = opt;
    o.schedule = s;
    if (same(run(o)))
      ++identical;
    else if (row.schedules.empty())
      row.schedules = "differs under " + s.name();
  }
  if (row.schedules.empty())
    row.schedules = fmt::format("{} identical", identical);
  else
    row.pass = false;
}

// Appends the simulator verdict to row.bytes: counted bytes that differ from the simulator's
// fail the row.
void check_against_sim(VerifyRow& row, const LaunchLog& counted, const LaunchLog& predicted);

// A kernel's verify row as data: the optimized run on given options, its comparison with the
// reference, when two runs are the same (schedule identity), what a run counted, the simulator's
// predicted launches and the row's bytes label.
template <class Outputs>
struct KernelRow {
  std::string component, name;
  std::function<Outputs(const RunOptions&)> run;
  std::function<std::vector<TensorCheck>(const Outputs&)> compare;
  std::function<bool(const Outputs&, const Outputs&)> same;
  std::function<LaunchLog(const Outputs&)> launches = [](const Outputs& o) { return o.launches; };
  std::function<LaunchLog()> predicted;
  std::string bytes;
};

// Runs a kernel row: the comparison, then under the emulator bit-identical outputs under every
// schedule and counted bytes equal to the simulator's.
template <class Outputs>
VerifyRow verify_kernel_row(const KernelRow<Outputs>& k, const RunOptions& opt) {
  VerifyRow row;
  row.component = k.component;
  row.name = k.name;
  row.backend = backend_name(opt.backend);
  const Outputs out = k.run(opt);
  row.launches = k.launches(out);
  fold_checks(row, k.compare(out));
  if (opt.backend != Backend::emu) return row;
  check_schedules(row, opt, k.run, [&](const Outputs& other) { return k.same(other, out); });
  row.bytes = k.bytes;
  check_against_sim(row, row.launches, k.predicted());
  return row;
}

}  // namespace tandem
