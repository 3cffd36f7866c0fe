#pragma once
// What the components' cases share: reading a stored case's config and tensors, checking the
// double reference against stored expectations (1e-12), folding tolerance checks into a golden
// report or a verify row, the schedule identity and the simulator's verdict.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <string>
#include <type_traits>
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

// Largest |a - b| and whether it is within 1e-12 of b's largest finite magnitude (equal
// infinities differ by 0, any other infinity by +inf). The double reference is deterministic;
// 1e-12 leaves room only for compilers contracting or reordering its sums.
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

// BadInput naming the file and tensor unless a stored tensor's shape is the expected one.
void check_shape(const LoadedCase& c, const std::string& name, const Shape& stored,
                 const Shape& expected);

// A stored tensor of the expected shape (BadInput naming the file and tensor otherwise).
template <class T>
Tensor<T> get_shaped(const LoadedCase& c, const std::string& name, const Shape& shape) {
  Tensor<T> t = c.blob.get_as<T>(name, c.blob_source);
  check_shape(c, name, t.shape, shape);
  return t;
}

// ---------------------------------------------------------------- blobs through for_each_tensor
// Each component's for_each_tensor (problem/<stem>.hpp) names the input tensors its golden blob
// stores; these write and read them. A std::vector is stored as a [n] tensor, a uint32 one
// (sequence positions, request ids) as I64, this safetensors layer having no U32.
template <class T>
void put_tensor(Safetensors& blob, const std::string& name, const Tensor<T>& t) {
  blob.put(name, t);
}
template <class T>
void put_tensor(Safetensors& blob, const std::string& name, const std::vector<T>& v) {
  using Stored = std::conditional_t<std::is_same_v<T, uint32_t>, int64_t, T>;
  blob.put(name, Tensor<Stored>({int64_t(v.size())}, std::vector<Stored>(v.begin(), v.end())));
}

// Stored I64 values as uint32 (BadInput naming the file and tensor outside [0, 2^32)).
std::vector<uint32_t> uint32_values(const LoadedCase& c, const std::string& name,
                                    const std::vector<int64_t>& stored);

// A stored tensor by name into `t`, in t's element type, whatever its shape (the caller then
// validates); into a vector, its values.
template <class T>
void load_tensor(const LoadedCase& c, const std::string& name, Tensor<T>& t) {
  t = c.blob.get_as<T>(name, c.blob_source);
}
template <class T>
void load_tensor(const LoadedCase& c, const std::string& name, std::vector<T>& v) {
  if constexpr (std::is_same_v<T, uint32_t>)
    v = uint32_values(c, name, c.blob.get_as<int64_t>(name, c.blob_source).data);
  else
    v = c.blob.get_as<T>(name, c.blob_source).data;
}

// A tensor's shape alone, for load_shaped: nothing is allocated from a config's sizes before the
// blob shows them.
template <class T>
Tensor<T> shaped(Shape shape) {
  Tensor<T> t;
  t.shape = std::move(shape);
  return t;
}

// A stored tensor by name into `t`, requiring the shape `t` already has (the caller sizes it
// from the config: a tensor through shaped(), a vector of n values stored as [n]); BadInput
// naming the file and tensor otherwise.
template <class T>
void load_shaped(const LoadedCase& c, const std::string& name, Tensor<T>& t) {
  t = get_shaped<T>(c, name, t.shape);
}
template <class T>
void load_shaped(const LoadedCase& c, const std::string& name, std::vector<T>& v) {
  if constexpr (std::is_same_v<T, uint32_t>)
    v = uint32_values(c, name, get_shaped<int64_t>(c, name, {int64_t(v.size())}).data);
  else
    v = get_shaped<T>(c, name, {int64_t(v.size())}).data;
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

// Reruns under every emulator schedule; the outputs must be bit-identical (DESIGN 3). The row's
// own run (opt.schedule) stands for its schedule: the emulator's result is a function of the
// schedule, so a second run under it would repeat the first (a quarter of verify's emulated time).
template <class Run, class Same>
void check_schedules(VerifyRow& row, const RunOptions& opt, Run run, Same same) {
  if (!opt.rerun_schedules) {
    row.schedules = "not rerun (" + opt.schedule.name() + ")";
    return;
  }
  int identical = 0;
  for (const emu::Schedule& s : emu::test_schedules()) {
    if (s == opt.schedule) {
      ++identical;
      continue;
    }
    RunOptions o = opt;
    o.schedule = s;
    o.watch_hazards = false;  // the row's own run was watched (RunOptions::watch_hazards)
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
