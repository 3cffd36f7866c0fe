#include "problem/residual.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <tuple>

#include "core/error.hpp"
#include "core/tensor_checks.hpp"

namespace tandem {

const char* residual_path_name(ResidualPath p) {
  return p == ResidualPath::v4_unfused ? "v4-unfused" : "v41-single-pass";
}

namespace {

void expect_shape(const Tensor<float>& t, const Shape& s, const std::string& what) {
  if (t.shape != s)
    throw_bad_input("residual input '{}': shape [{}] where [{}] is expected", what,
                    fmt::join(t.shape, ", "), fmt::join(s, ", "));
}

void check_width(int64_t d) {
  if (d <= 0 || d % 8 || d > kResidualMaxWidth)
    throw_bad_input("residual.d: a multiple of 8 in [8, {}], got {}", kResidualMaxWidth, d);
}

// The config the kernels support and the state x: [T >= 1, 4, d]; returns T.
int64_t check_residual_state(const ResidualConfig& c, const Tensor<float>& x, const char* name) {
  const int64_t d = c.d;
  if (c.hc_mult != 4) throw_bad_input("residual.hc_mult: the kernels need 4, got {}", c.hc_mult);
  check_width(d);
  if (x.shape.size() != 3 || x.dim(0) < 1)
    throw_bad_input("residual input '{}': expected [T, 4, d] with T >= 1", name);
  expect_shape(x, {x.dim(0), c.hc_mult, d}, name);
  return x.dim(0);
}

void check_mixes(const ResidualSiteWeights& w, int64_t d, const std::string& name) {
  expect_shape(w.fn, {24, 4 * d}, name + ".fn");
  expect_shape(w.base, {24}, name + ".base");
  expect_shape(w.scale, {3}, name + ".scale");
}

}  // namespace

void validate_residual_inputs(const ResidualStackInputs& in) {
  const ResidualConfig& c = in.cfg;
  const int64_t d = c.d;
  check_residual_state(c, in.x0, "x0");
  if (in.sites.size() != static_cast<size_t>(c.sites) || in.sites.empty())
    throw_bad_input("residual inputs: {} sites where residual.sites = {}", in.sites.size(),
                    c.sites);
  auto check_site = [&](const ResidualSiteWeights& w, const std::string& name, bool with_sub) {
    check_mixes(w, d, name);
    expect_shape(w.norm_w, {d}, name + ".norm_w");
    if (with_sub) expect_shape(w.w_sub, {d, d}, name + ".w_sub");
  };
  for (size_t l = 0; l < in.sites.size(); ++l)
    check_site(in.sites[l], fmt::format("site{}", l), true);
  check_site(in.head, "head", false);
}

void validate_residual_boundary(const ResidualBoundaryInputs& in) {
  const int64_t T = check_residual_state(in.cfg, in.x, "x"), d = in.cfg.d;
  const bool close = !in.f.data.empty(), open = !in.next.norm_w.data.empty();
  if (close) expect_shape(in.f, {T, d}, "f");
  if (close || !in.coef.data.empty()) expect_shape(in.coef, {T, 24}, "coef");
  if (!close && !open) throw_bad_input("residual boundary: neither 'f' nor 'next.norm_w' given");
  if (open) expect_shape(in.next.norm_w, {d}, "next.norm_w");
  if (!in.next.fn.data.empty()) check_mixes(in.next, d, "next");
  for (const auto& [name, t] :
       {std::pair{"x", &in.x}, std::pair{"f", &in.f}, std::pair{"coef", &in.coef}})
    require_finite(*t, "residual boundary input", name);
}

void validate_rms_norm(const RmsNormInputs& in) {
  if (in.u.shape.size() != 2 || in.u.dim(0) < 1)
    throw_bad_input("rms norm input 'u': expected [T, d] with T >= 1");
  check_width(in.u.dim(1));
  if (!in.w.data.empty()) expect_shape(in.w, {in.u.dim(1)}, "w");
  if (!(in.eps >= 0) || !std::isfinite(in.eps))
    throw_bad_input("rms norm: eps must be finite and >= 0, got {}", in.eps);
  for (const auto& [name, t] : {std::pair{"u", &in.u}, std::pair{"w", &in.w}})
    require_finite(*t, "rms norm input", name);
}

}  // namespace tandem
