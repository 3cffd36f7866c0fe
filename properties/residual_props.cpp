// The residual path (DESIGN 5.1): optimized kernels (emu and, with a GPU, cuda) against the
// reference, the V4.1 recipe shift's algebra, Sinkhorn invariants, convexity, schedules and
// counted bytes. Case names print their parameters; a failing differential case dumps inputs,
// reference and result to residual_<case>.safetensors (in $TANDEM_DUMP_DIR or the cwd).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstdlib>

#include "cases/case_util.hpp"
#include "cases/residual_case.hpp"
#include "sim/residual_traffic.hpp"

namespace tandem {
namespace {

struct ResidualCase {
  int tokens, d, sites, block;
  ResidualPath path;
  ActDType act;
  uint64_t seed;
  double norm_eps = 1e-6;  // V4's 1e-6, the released V4.1's 1e-20, or the config's top
  int x_shift = 0;         // x0 scaled by 2^-x_shift: at 2^-12, mean(x^2) ~ 1e-7 and eps matters
  double hc_eps = 1e-6;    // the release's, none, or the config's top (1e-2: a dropped eps shows)
  int sinkhorn_iters = 20;

  ResidualConfig cfg() const {
    ResidualConfig c;
    c.d = d, c.sites = sites, c.tokens = tokens, c.norm_eps = norm_eps;
    c.hc_eps = hc_eps, c.sinkhorn_iters = sinkhorn_iters;
    return c;
  }
  std::string name() const {
    return fmt::format("{}_{}_T{}_d{}_sites{}_block{}_eps{:g}_x2^-{}_hceps{:g}_iters{}_seed{}",
                       residual_path_name(path), act_dtype_name(act), tokens, d, sites, block,
                       norm_eps, x_shift, hc_eps, sinkhorn_iters, seed);
  }
  // Seeded inputs; the power-of-two scale keeps bf16 inputs exactly representable.
  ResidualStackInputs inputs() const {
    ResidualStackInputs in = make_residual_inputs(cfg(), tokens, act, seed);
    for (float& v : in.x0.data) v = std::ldexp(v, -x_shift);
    return in;
  }
};

rc::Gen<ResidualCase> gen_case() {
  return rc::gen::build<ResidualCase>(
      rc::gen::set(&ResidualCase::tokens, rc::gen::inRange(1, 5)),
      // A quarter of the cases past one pass of every block size over d (a thread's 4 or 8
      // values a pass: 32 x 8 = 256 ... 128 x 8 = 1024), each with a tail of one 8-value pack.
      rc::gen::set(&ResidualCase::d,
                   rc::gen::weightedOneOf<int>(
                       {{3, rc::gen::map(rc::gen::inRange(1, 13), [](int k) { return 8 * k; })},
                        {1, rc::gen::element(264, 520, 1032)}})),
      rc::gen::set(&ResidualCase::sites, rc::gen::inRange(1, 4)),
      rc::gen::set(&ResidualCase::block, rc::gen::element(32, 64, 128)),
      rc::gen::set(&ResidualCase::path,
                   rc::gen::element(ResidualPath::v4_unfused, ResidualPath::v41_single_pass)),
      rc::gen::set(&ResidualCase::act, rc::gen::element(ActDType::f32, ActDType::bf16)),
      rc::gen::set(&ResidualCase::seed, rc::gen::arbitrary<uint64_t>()),
      rc::gen::set(&ResidualCase::norm_eps, rc::gen::element(1e-6, 1e-20, 1e-2)),
      rc::gen::set(&ResidualCase::x_shift, rc::gen::element(0, 12)),
      rc::gen::set(&ResidualCase::hc_eps, rc::gen::element(1e-6, 0.0, 1e-2)),
      rc::gen::set(&ResidualCase::sinkhorn_iters, rc::gen::element(20, 1, 3)));
}

void dump_failure(const ResidualCase& c, const ResidualStackInputs& in,
                  const reference::ResidualRefOutputs& truth, const ResidualStackOutputs& out) {
  Safetensors st;
  put_residual_inputs(st, in);
  st.put("truth.y_out", truth.y_out);
  st.put("truth.x_out", truth.x_out);
  st.put("optimized.y_out", out.y_out);
  st.put("optimized.x_out", out.x_out);
  const char* dir = std::getenv("TANDEM_DUMP_DIR");
  write_safetensors(std::string(dir ? dir : ".") + "/residual_" + c.name() + ".safetensors", st);
}

// The optimized stack on `backend` against the reference under the tolerance policy: empty when
// it passes, else the first diverging tensor (and the case is dumped).
std::string check_against_reference(const ResidualCase& c, Backend backend) {
  const ResidualStackInputs in = c.inputs();
  const auto truth = reference::run_truth(in, c.path);
  const ResidualStackOutputs out = run_residual_stack(in, c.path, {backend, {}, c.block});
  for (const TensorCheck& t : check_residual_stack(in, c.path, truth, out)) {
    if (t.result.pass) continue;
    dump_failure(c, in, truth, out);
    return c.name() + ": first divergence " + t.name + ": " + t.result.summary();
  }
  return {};
}

RC_GTEST_PROP(ResidualEmu, OptimizedMatchesReference, ()) {
  const ResidualCase c = *gen_case();
  RC_TAG(residual_path_name(c.path), act_dtype_name(c.act));
  const std::string failure = check_against_reference(c, Backend::emu);
  RC_LOG() << failure;
  RC_ASSERT(failure.empty());
}

TEST(ResidualCuda, OptimizedMatchesReference) {
  const BackendStatus cuda = cuda_status();
  if (!cuda.available) GTEST_SKIP() << cuda.detail;
  for (ResidualPath path : {ResidualPath::v4_unfused, ResidualPath::v41_single_pass})
    for (ActDType act : {ActDType::f32, ActDType::bf16})
      for (int d : {8, 64, 1024})
        EXPECT_EQ(check_against_reference({16, d, 3, 128, path, act, 7}, Backend::cuda), "");
}

// Shifted block fed its own current pre == the V4 block, exactly (same precision).
template <class S, class Act>
void shifted_with_own_pre_is_v4(const ResidualCase& c) {
  const ResidualStackInputs in = make_residual_inputs(c.cfg(), 1, c.act, c.seed);
  const auto site = reference::to_site<S>(in.sites[0], c.d);
  const auto X = reference::token_state<S>(in.x0, 0, c.d);
  const auto own = reference::hc_mixes<S>(X, site, c.cfg()).pre;
  const auto v4 = reference::v4_site<S, Act>(X, site, c.cfg());
  const auto shifted = reference::shifted_site<S, Act>(X, own, site, c.cfg());
  RC_ASSERT(shifted.x_next == v4.x_next);
  RC_ASSERT(shifted.y == v4.y);
  RC_ASSERT(shifted.pre == v4.pre);
}

RC_GTEST_PROP(ResidualReference, ShiftedSiteFedItsOwnPreIsV4, ()) {
  const ResidualCase c = *gen_case();
  shifted_with_own_pre_is_v4<double, double>(c);
  shifted_with_own_pre_is_v4<float, float>(c);
}

// ... and fed the previous site's pre it differs (the shift is real, not a no-op).
RC_GTEST_PROP(ResidualReference, ShiftChangesTheCollapse, ()) {
  ResidualCase c = *gen_case();
  c.sites = 2;
  const ResidualStackInputs in = make_residual_inputs(c.cfg(), 1, ActDType::f32, c.seed);
  const auto v4 = reference::run_truth(in, ResidualPath::v4_unfused);
  const auto v41 = reference::run_truth(in, ResidualPath::v41_single_pass);
  RC_ASSERT(v4.taps_y[0].data != v41.taps_y[0].data);
  RC_ASSERT(v4.taps_y[1].data != v41.taps_y[1].data);
}

// Sinkhorn: non-negative, every column sums to 1 (up to the +eps in its normaliser), rows
// approximately (bound measured below for logits in [-L, L]).
RC_GTEST_PROP(ResidualReference, SinkhornColumnsSumToOneRowsNearly, ()) {
  const double L = *rc::gen::inRange(1, 9);
  reference::Mat4<double> logits;
  for (int i = 0; i < 16; ++i) logits.data()[i] = L * (*rc::gen::inRange(-1000, 1001)) / 1000.0;
  const double eps = 1e-6;
  const auto c = reference::sinkhorn<double>(logits, 20, eps);
  RC_ASSERT(c.minCoeff() >= 0.0);
  for (int k = 0; k < 4; ++k) {
    // Columns end as s / (s + eps) with s >= 1 - 4 eps: within 2 eps of 1 (+ double rounding).
    RC_ASSERT(std::fabs(c.col(k).sum() - 1.0) <= 2 * eps + 1e-14);
  }
  // Row sums after 20 iterations, measured over 10^5 uniform draws per L: max |row - 1| was
  // 1e-6 (L=1), 1e-3 (L=2), 0.029 (L=4), 0.076 (L=8). Bounds: twice the measured maximum.
  const double row_bound = L <= 1 ? 2e-6 + 2 * eps : L <= 2 ? 2e-3 : L <= 4 ? 0.06 : 0.15;
  for (int j = 0; j < 4; ++j) RC_ASSERT(std::fabs(c.row(j).sum() - 1.0) <= row_bound);
}

// With f = 0 every output stream is sum_j c[j][k] X_j with c >= 0 and column sums s/(s + hc_eps)
// < 1 (Sinkhorn ends on columns): a combination of the inputs and 0, so elementwise within
// [min(0, min_j X_j), max(0, max_j X_j)], widened by float rounding only. (Column sums near 1,
// the tighter [min_j, max_j], hold only once Sinkhorn has converged: with 1 iteration and
// hc_eps = 1e-2 a column can sum to 0.8.)
template <class A, class B>
bool within_input_hull(const Tensor<A>& before, const Tensor<B>& after, int64_t tokens, int d) {
  for (int64_t t = 0; t < tokens; ++t) {
    for (int i = 0; i < d; ++i) {
      double lo = 0, hi = 0;
      for (int j = 0; j < 4; ++j) {
        lo = std::min<double>(lo, before.data[(t * 4 + j) * d + i]);
        hi = std::max<double>(hi, before.data[(t * 4 + j) * d + i]);
      }
      // 8 float ulps: four products summed in f32.
      const double slack = 8 * 0x1p-24 * std::max(std::fabs(lo), std::fabs(hi));
      for (int k = 0; k < 4; ++k) {
        const double v = after.data[(t * 4 + k) * d + i];
        if (v < lo - slack || v > hi + slack) return false;
      }
    }
  }
  return true;
}

RC_GTEST_PROP(ResidualEmu, WithZeroBranchOutputsStayInTheInputHull, ()) {
  const ResidualCase c = *gen_case();
  const ResidualStackInputs in = make_residual_inputs(c.cfg(), c.tokens, c.act, c.seed, 0.0f);
  const ResidualStackOutputs out = run_residual_stack(in, c.path, {Backend::emu, {}, c.block});
  const auto truth = reference::run_truth(in, c.path);
  const Tensor<double> x0 = tensor_cast<double>(in.x0);
  for (int l = 0; l < c.sites; ++l) {
    RC_ASSERT(within_input_hull(l ? out.taps_x[l - 1] : in.x0, out.taps_x[l], c.tokens, c.d));
    RC_ASSERT(within_input_hull(l ? truth.taps_x[l - 1] : x0, truth.taps_x[l], c.tokens, c.d));
  }
}

RC_GTEST_PROP(ResidualEmu, BitIdenticalUnderEverySchedule, ()) {
  const ResidualCase c = *gen_case();
  const ResidualStackInputs in = make_residual_inputs(c.cfg(), c.tokens, c.act, c.seed);
  const auto schedules = emu::test_schedules();
  const ResidualStackOutputs first =
      run_residual_stack(in, c.path, {Backend::emu, schedules[0], c.block});
  for (size_t s = 1; s < schedules.size(); ++s) {
    const ResidualStackOutputs other =
        run_residual_stack(in, c.path, {Backend::emu, schedules[s], c.block});
    RC_ASSERT(compare_exact<float>(first.x_out.span(), other.x_out.span()).pass);
    RC_ASSERT(compare_exact<float>(first.y_out.span(), other.y_out.span()).pass);
  }
}

// Counted activation bytes per token per site: 20d (V4 unfused) and 10d (V4.1) elements, exactly;
// coefficient traffic: 24 floats in and out per token per boundary.
RC_GTEST_PROP(ResidualEmu, CountedBytesMatchTheDesign, ()) {
  const ResidualCase c = *gen_case();
  const ResidualStackInputs in = make_residual_inputs(c.cfg(), c.tokens, c.act, c.seed);
  const ResidualStackOutputs out = run_residual_stack(in, c.path, {Backend::emu, {}, c.block});
  const uint64_t elem = act_bytes(c.act);
  const uint64_t per_site = (c.path == ResidualPath::v4_unfused ? 20 : 10) * uint64_t(c.d) * elem;
  const auto counted = counted_activation_bytes_per_site(out.launches, c.path);
  RC_ASSERT(counted.size() == static_cast<size_t>(c.sites));
  for (uint64_t b : counted) RC_ASSERT(b == per_site * c.tokens);
  for (const LaunchCounts& l : out.launches) {
    if (l.kernel.find("residual_single_pass") == 0 &&
        l.kernel.find("boundary") != std::string::npos) {
      RC_ASSERT(l.read_bytes(Traffic::coefficient) == 96u * c.tokens);
      RC_ASSERT(l.written_bytes(Traffic::coefficient) == 96u * c.tokens);
    }
  }
}

// run_residual_boundary in each of the ways the end-to-end model uses it.
enum class BoundaryMode { first, open_carried, boundary, head, close_only };
const char* mode_name(BoundaryMode m) {
  constexpr const char* names[] = {"first", "open_carried", "boundary", "head", "close_only"};
  return names[int(m)];
}

ResidualBoundaryInputs make_boundary_inputs(const ResidualCase& c, BoundaryMode mode) {
  ResidualConfig cfg = c.cfg();
  cfg.sites = 2;
  const ResidualStackInputs st = make_residual_inputs(cfg, c.tokens, c.act, c.seed);
  ResidualBoundaryInputs in{cfg, c.act, st.x0, {}, {}, st.sites[0]};
  in.next.w_sub = {};
  // Realistic coefficients: site 1's mixes of the same state; f: a seeded branch output.
  const auto coef =
      reference::residual_boundary_baseline({cfg, c.act, st.x0, {}, {}, st.sites[1]}).coef;
  const Tensor<float> coef_f(coef.shape, {coef.data.begin(), coef.data.end()});
  Tensor<float> f = seeded_tensor({c.tokens, c.d}, c.seed, 77, -1.0f, 1.0f);
  for (float& v : f.data) v = c.act == ActDType::bf16 ? reference::store<bf16>(v) : v;
  if (mode != BoundaryMode::first) in.coef = coef_f;
  if (mode >= BoundaryMode::boundary) in.f = f;
  if (mode == BoundaryMode::head) in.next = {{}, {}, {}, st.sites[0].norm_w, {}};
  if (mode == BoundaryMode::close_only) in.next = {};
  return in;
}

RC_GTEST_PROP(ResidualEmu, BoundaryMatchesReferenceInEveryMode, ()) {
  const ResidualCase c = *gen_case();
  const auto mode =
      *rc::gen::element(BoundaryMode::first, BoundaryMode::open_carried, BoundaryMode::boundary,
                        BoundaryMode::head, BoundaryMode::close_only);
  RC_LOG() << c.name() << " " << mode_name(mode);
  const ResidualBoundaryInputs in = make_boundary_inputs(c, mode);
  const auto schedules = emu::test_schedules();
  const ResidualBoundaryOutputs out =
      run_residual_boundary(in, {Backend::emu, schedules[0], c.block});
  for (const TensorCheck& t : check_residual_boundary(in, out)) {
    RC_LOG() << t.name << ": " << t.result.summary();
    RC_ASSERT(t.result.pass);
  }
  for (const auto& s : schedules) {
    const ResidualBoundaryOutputs again = run_residual_boundary(in, {Backend::emu, s, c.block});
    RC_ASSERT(again.x.data == out.x.data && again.y.data == out.y.data &&
              again.coef.data == out.coef.data);
  }
  const bool close = !in.f.data.empty(), open = !in.next.norm_w.data.empty();
  RC_ASSERT(same_traffic(out.launches, {sim::predict_residual_boundary(c.tokens, c.d, c.act, close,
                                                                       !in.coef.data.empty(), open,
                                                                       !in.next.fn.data.empty())}));
}

// The baseline runs in the kernels' storage precision: bf16 activations hold bf16 values only;
// f32 ones hold values bf16 cannot, and stay within f32 rounding of the truth (a baseline run in
// bf16 would widen every f32 budget ~2^16-fold and let a bf16-rounding kernel pass).
RC_GTEST_PROP(ResidualReference, TheBaselineStoresTheActivationDtype, ()) {
  const ResidualCase c = *gen_case();
  const ResidualStackInputs in = c.inputs();
  const auto base = reference::run_baseline(in, c.path);
  const auto all_bf16 = [](const Tensor<double>& t) {
    return std::all_of(t.data.begin(), t.data.end(),
                       [](double v) { return double(reference::store<bf16>(float(v))) == v; });
  };
  const auto boundary =
      reference::residual_boundary_baseline(make_boundary_inputs(c, BoundaryMode::boundary));
  if (c.act == ActDType::bf16) {
    RC_ASSERT(all_bf16(base.x_out) && all_bf16(base.y_out));
    RC_ASSERT(all_bf16(boundary.x) && all_bf16(boundary.y));
    return;
  }
  RC_ASSERT(!all_bf16(base.x_out) && !all_bf16(boundary.x));
  const auto truth = reference::run_truth(in, c.path);
  double scale = 0, err = 0;
  for (size_t i = 0; i < truth.x_out.data.size(); ++i) {
    scale = std::max(scale, std::fabs(truth.x_out.data[i]));
    err = std::max(err, std::fabs(base.x_out.data[i] - truth.x_out.data[i]));
  }
  // 2^-14 of the largest element: f32 sums over <= 4 x 96 terms and <= 3 sites stay below
  // ~2^-17; one bf16 rounding alone is up to 2^-9.
  RC_ASSERT(err <= 0x1p-14 * scale);
}

// Sinkhorn's softmax is shift-invariant per comb row: a row of logits around +100 (expf
// overflows) or -120 (expf underflows to 0) must be shifted by its own max first, not by 0. The
// opened site's coefficients (kernel and reference) stay those of the unshifted logits.
RC_GTEST_PROP(ResidualEmu, CombRowsFarFromZeroAreShiftedByTheirMax, ()) {
  const ResidualCase c = *gen_case();
  const ResidualBoundaryInputs in = make_boundary_inputs(c, BoundaryMode::boundary);
  ResidualBoundaryInputs shifted = in;
  const int row = *rc::gen::inRange(0, 4);
  const float shift = *rc::gen::element(100.0f, -120.0f);
  RC_LOG() << c.name() << " comb row " << row << " + " << shift;
  for (int k = 0; k < 4; ++k) shifted.next.base.data[size_t(8 + 4 * row + k)] += shift;  // comb
  // 1e-4: the shifted base and logits lose their bits below 2^-17 (the float ulp near 100), which
  // moves a coefficient by about that; the policy's budget (drawn from unshifted-size rounding)
  // does not apply to logits this large.
  const auto near = [](const auto& a, const auto& b) {
    for (size_t i = 0; i < a.size(); ++i)
      if (!(std::fabs(double(a[i]) - double(b[i])) <= 1e-4)) return false;
    return a.size() == b.size();
  };
  const RunOptions opt{Backend::emu, {}, c.block};
  RC_ASSERT(near(run_residual_boundary(shifted, opt).coef.data,
                 run_residual_boundary(in, opt).coef.data));
  RC_ASSERT(near(run_residual_boundary_reference(shifted).truth.coef.data,
                 run_residual_boundary_reference(in).truth.coef.data));
}

// The single pass forms y and the next coefficients from X_{l+1} as stored (bf16 rounded), not
// from the wider values it computed: closing and opening in one pass equals opening from the
// closed state that was written, bit for bit.
RC_GTEST_PROP(ResidualEmu, OnePassBoundaryEqualsOpeningTheStoredState, ()) {
  const ResidualCase c = *gen_case();
  const ResidualBoundaryInputs in = make_boundary_inputs(c, BoundaryMode::boundary);
  const ResidualBoundaryOutputs both = run_residual_boundary(in, {Backend::emu, {}, c.block});
  ResidualBoundaryInputs open = in;
  open.f = {}, open.x = both.x;
  const ResidualBoundaryOutputs opened = run_residual_boundary(open, {Backend::emu, {}, c.block});
  RC_ASSERT(opened.y.data == both.y.data);
  RC_ASSERT(opened.coef.data == both.coef.data);
}

// The pre the open pass collapses with is the carried one: with coef's pre = e_k, y is the
// normalised stream k.
TEST(ResidualEmu, OpenedSiteCollapsesWithTheCarriedPre) {
  const ResidualCase c{2, 16, 2, 64, ResidualPath::v41_single_pass, ActDType::f32, 3};
  ResidualBoundaryInputs in = make_boundary_inputs(c, BoundaryMode::open_carried);
  for (int k = 0; k < 4; ++k) {
    for (int64_t t = 0; t < c.tokens; ++t)
      for (int i = 0; i < 4; ++i) in.coef.data[t * 24 + i] = i == k ? 1.0f : 0.0f;
    ResidualBoundaryInputs stream = in;  // the same collapse from the first site's [1, 0, 0, 0]
    stream.coef = {};
    for (int64_t t = 0; t < c.tokens; ++t)
      std::copy_n(in.x.ptr() + (t * 4 + k) * c.d, c.d, stream.x.ptr() + t * 4 * c.d);
    EXPECT_EQ(run_residual_boundary(in, {}).y.data, run_residual_boundary(stream, {}).y.data) << k;
  }
}

TEST(ResidualInputs, AreSeededAndNeverAllZero) {
  ResidualConfig cfg;
  const auto a = make_residual_inputs(cfg, 2, ActDType::bf16, 5);
  const auto b = make_residual_inputs(cfg, 2, ActDType::bf16, 5);
  const auto c = make_residual_inputs(cfg, 2, ActDType::bf16, 6);
  EXPECT_EQ(a.x0.data, b.x0.data);
  EXPECT_NE(a.x0.data, c.x0.data);
  EXPECT_TRUE(std::any_of(a.x0.data.begin(), a.x0.data.end(), [](float v) { return v != 0; }));
  for (float v : a.x0.data) EXPECT_EQ(v, reference::store<bf16>(v));  // rounded to storage
}

TEST(ResidualInputs, BadShapesAreRejected) {
  ResidualConfig cfg;
  auto in = make_residual_inputs(cfg, 2, ActDType::f32, 5);
  in.sites[1].fn = Tensor<float>({24, 7});
  try {
    run_residual_stack(in, ResidualPath::v4_unfused, {});
    FAIL();
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("site1.fn"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem
