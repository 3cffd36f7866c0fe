#include "cases/case_check.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/error.hpp"

namespace tandem {

bool CaseReport::pass() const {
  return std::all_of(tensors.begin(), tensors.end(), [](const CheckedTensor& t) { return t.pass; });
}

ActDType parse_act(const JsonFields& f) {
  const std::string a = f.string("act");
  if (a == "f32") return ActDType::f32;
  if (a == "bf16") return ActDType::bf16;
  throw_bad_input("{}: expected f32 or bf16, got '{}'", f.where("act"), a);
}

// Any stored tensor as doubles (F64, F32, I64, I32), for deltas.
std::vector<double> as_doubles(const StTensor& t) {
  const size_t n = t.bytes.size() / dtype_size(t.dtype);
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) {
    const char* p = t.bytes.data() + i * dtype_size(t.dtype);
    switch (t.dtype) {
      case DType::F64: {
        double x;
        std::memcpy(&x, p, 8);
        v[i] = x;
        break;
      }
      case DType::F32: {
        float x;
        std::memcpy(&x, p, 4);
        v[i] = x;
        break;
      }
      case DType::I64: {
        int64_t x;
        std::memcpy(&x, p, 8);
        v[i] = double(x);
        break;
      }
      case DType::I32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        v[i] = x;
        break;
      }
      default:
        v[i] = static_cast<uint8_t>(*p);
    }
  }
  return v;
}

void check_shape(const LoadedCase& c, const std::string& name, const Shape& stored,
                 const Shape& expected) {
  if (stored != expected)
    throw_bad_input("{}: tensor '{}' has shape {}, expected {}", c.blob_source, name,
                    fmt::join(stored, "x"), fmt::join(expected, "x"));
}

std::vector<uint32_t> uint32_values(const LoadedCase& c, const std::string& name,
                                    const std::vector<int64_t>& stored) {
  std::vector<uint32_t> v;
  v.reserve(stored.size());
  for (int64_t x : stored) {
    if (x < 0 || x > UINT32_MAX)
      throw_bad_input("{}: tensor '{}' holds {}, outside [0, 2^32)", c.blob_source, name, x);
    v.push_back(uint32_t(x));
  }
  return v;
}

Delta delta(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return {INFINITY, 0};
  Delta d;
  for (size_t i = 0; i < a.size(); ++i) {
    // Equal infinities are no difference; any other infinity (or NaN) is an infinite one, and
    // the scale is the finite values' (an infinity in it would let any difference pass).
    const double e = a[i] == b[i] ? 0.0 : std::fabs(a[i] - b[i]);
    d.max_abs = std::max(d.max_abs, std::isnan(e) ? INFINITY : e);  // max() would drop a NaN
    if (std::isfinite(b[i])) d.scale = std::max(d.scale, std::fabs(b[i]));
  }
  return d;
}

// The reference recomputed now against the stored expectation, which must have its shape.
CheckedTensor reference_check(const std::string& name, const Values& now, const StTensor& stored) {
  if (stored.shape != now.shape)
    throw_bad_input("tensor 'expected.{}' has shape {}, the case computes {}", name,
                    fmt::join(stored.shape, "x"), fmt::join(now.shape, "x"));
  const Delta dl = delta(now.v, as_doubles(stored));
  return {name, "ref-1e-12", dl.within(),
          fmt::format("reference max |now - stored| = {:.3e} (limit {:.3e})", dl.max_abs,
                      1e-12 * dl.scale)};
}

// The optimized result against the stored truth under the tolerance policy (baseline recomputed).
void add_checks(CaseReport& report, const std::vector<TensorCheck>& checks,
                const std::vector<std::pair<std::string, std::string>>& rules) {
  for (const TensorCheck& t : checks) {
    const auto rule =
        std::find_if(rules.begin(), rules.end(), [&](const auto& r) { return r.first == t.name; });
    report.tensors.push_back({t.name, rule == rules.end() ? "tolerance" : rule->second,
                              t.result.pass, t.result.summary()});
  }
}

// Refuses stored shapes that multiply to more than kMaxWork multiply-adds per run (the blob's own
// size bound does not bound the work).
void within_work(const LoadedCase& c, const char* tensors, double work) {
  if (work > kMaxWork)
    throw_bad_input("{}: tensors {} imply ~{:.3g} multiply-adds per run; the limit is {:.3g}",
                    c.blob_source, tensors, work, kMaxWork);
}

// Folds tensor checks into a row: the first failing tensor, and the smallest margin.
void fold_checks(VerifyRow& row, const std::vector<TensorCheck>& checks) {
  row.pass = true;
  row.margin = 1;
  for (const TensorCheck& c : checks) {
    if (!c.result.pass && row.first_divergence.empty()) {
      row.first_divergence = c.name;
      row.detail = c.result.summary();
      row.pass = false;
    }
    if (c.result.margin() < row.margin || row.worst_tensor.empty()) {
      row.worst_tensor = c.name, row.margin = c.result.margin();
      row.worst_err = c.result.worst_err, row.budget = c.result.worst_budget;
    }
  }
}

// Appends the simulator verdict to row.bytes: counted bytes that differ from the simulator's
// fail the row.
void check_against_sim(VerifyRow& row, const LaunchLog& counted, const LaunchLog& predicted) {
  const bool same = same_traffic(predicted, counted);
  row.bytes += same ? " == sim" : " != sim";
  if (!same) row.pass = false, row.detail += " counted bytes differ from the simulator";
}

}  // namespace tandem
