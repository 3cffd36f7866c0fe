#pragma once
// Eigen reference of the mHC residual path (DESIGN section 5.1), written to read like the math.
// Templated on the scalar S (double = truth, float = same-precision baseline) and on Act, the
// storage dtype whose rounding the baseline applies wherever the kernels store a tensor
// (Act = double: no rounding). One token at a time: a state X is a [4, d] matrix (row j = stream
// j).
#include <Eigen/Dense>
#include <array>
#include <cmath>
#include <type_traits>

#include "core/dtype.hpp"
#include "core/model_config.hpp"
#include "core/tensor.hpp"
#include "problem/residual.hpp"

namespace tandem::reference {

template <class S>
using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;
template <class S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class S>
using Vec4 = Eigen::Matrix<S, 4, 1>;
template <class S>
using Mat4 = Eigen::Matrix<S, 4, 4, Eigen::RowMajor>;

// A float weight tensor [rows, cols] as a matrix in S.
template <class S>
Mat<S> as_matrix(const Tensor<float>& w) {
  return Eigen::Map<const Eigen::Matrix<float, -1, -1, Eigen::RowMajor>>(w.ptr(), w.dim(0),
                                                                         w.dim(1))
      .cast<S>();
}

// Rounds a value to the storage dtype Act, as a kernel's store does.
template <class Act, class S>
S store(S v) {
  if constexpr (std::is_same_v<Act, bf16>)
    return static_cast<S>(bf16_decode(bf16_encode(static_cast<float>(v))));
  else if constexpr (std::is_same_v<Act, float>)
    return static_cast<S>(static_cast<float>(v));
  else
    return v;
}
template <class Act, class Derived>
auto store_all(const Eigen::MatrixBase<Derived>& m) {
  using S = typename Derived::Scalar;
  return m.unaryExpr([](S v) { return store<Act>(v); }).eval();
}

template <class S>
struct Coefficients {
  Vec4<S> pre, post;
  Mat4<S> comb;  // comb(j, k): weight of input stream j in output stream k
};

template <class S>
struct Site {
  Mat<S> fn;      // [24, 4d]
  Vec<S> base;    // [24]
  Vec<S> scale;   // [3]
  Vec<S> norm_w;  // [d]
  Mat<S> w_sub;   // [d, d]
};

// Row softmax + eps, a column pass, then (iters - 1) row and column passes (each with +eps).
template <class S>
Mat4<S> sinkhorn(const Mat4<S>& logits, int iters, S eps) {
  Mat4<S> c;
  for (int j = 0; j < 4; ++j) {
    const auto e = (logits.row(j).array() - logits.row(j).maxCoeff()).exp();
    c.row(j) = (e / e.sum()).matrix();
  }
  c.array() += eps;
  auto columns = [&] {
    for (int k = 0; k < 4; ++k) c.col(k) /= c.col(k).sum() + eps;
  };
  auto rows = [&] {
    for (int j = 0; j < 4; ++j) c.row(j) /= c.row(j).sum() + eps;
  };
  columns();
  for (int it = 1; it < iters; ++it) rows(), columns();
  return c;
}

// The order naive_dot sums in, per thread: 0 (the default) is plain left to right, the
// baseline's "naive ordering" (DESIGN section 4); 1 is a pairwise tree; k >= 2 starts at an
// offset of its own and wraps, backwards for even k; kWarpSumOrder is a warp's (below). A whole
// model's baseline is drawn again in other orders under a ScopedSumOrder, every reduction of the
// run alike (README, tolerance refinement 2): its taps cannot be permuted back the way one
// kernel's inputs can.
inline thread_local int t_sum_order = 0;
// 32 contiguous blocks (one per lane) each summed left to right, then an xor butterfly over the
// blocks' sums: the tree a warp reduces in, whose partial sums can round where no sequential
// order does (a one-record attention score: every rotation exact, the butterfly 4 ulp off).
inline constexpr int kWarpSumOrder = -1;
class ScopedSumOrder {
 public:
  explicit ScopedSumOrder(int order) : saved_(t_sum_order) { t_sum_order = order; }
  ~ScopedSumOrder() { t_sum_order = saved_; }
  ScopedSumOrder(const ScopedSumOrder&) = delete;
  ScopedSumOrder& operator=(const ScopedSumOrder&) = delete;

 private:
  int saved_;
};

template <class S, class A, class B>
S pairwise_dot(const A& a, const B& b, Eigen::Index first, Eigen::Index n) {
  if (n <= 2) {
    S sum = 0;
    for (Eigen::Index i = first; i < first + n; ++i) sum += a(i) * b(i);
    return sum;
  }
  return pairwise_dot<S>(a, b, first, n / 2) + pairwise_dot<S>(a, b, first + n / 2, n - n / 2);
}

template <class S, class A, class B>
S warp_order_dot(const A& a, const B& b) {
  constexpr int kLanes = 32;
  const Eigen::Index n = a.size(), per = (n + kLanes - 1) / kLanes;
  std::array<S, kLanes> lane{};
  for (Eigen::Index i = 0; i < n; ++i) lane[size_t(i / per)] += a(i) * b(i);
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    std::array<S, kLanes> next;
    for (int l = 0; l < kLanes; ++l) next[size_t(l)] = lane[size_t(l)] + lane[size_t(l ^ offset)];
    lane = next;
  }
  return lane[0];
}

// Sums a . b in the thread's order (above), so not as Eigen's vectorised reductions would.
template <class S, class A, class B>
S naive_dot(const A& a, const B& b) {
  const Eigen::Index n = a.size();
  S sum = 0;
  if (t_sum_order == 0) {
    for (Eigen::Index i = 0; i < n; ++i) sum += a(i) * b(i);
    return sum;
  }
  if (t_sum_order == 1) return pairwise_dot<S>(a, b, 0, n);
  if (t_sum_order == kWarpSumOrder) return warp_order_dot<S>(a, b);
  // Offsets spread by the golden ratio: no two orders start alike for long rows.
  const auto start = static_cast<Eigen::Index>(n * std::fmod(t_sum_order * 0.6180339887, 1.0));
  const bool backwards = t_sum_order % 2 == 0;
  for (Eigen::Index k = 0; k < n; ++k) {
    const Eigen::Index i = (start + (backwards ? n - k : k)) % n;
    sum += a(i) * b(i);
  }
  return sum;
}
// In float (the baseline) every row sums in the thread's order; the double truth's order does
// not matter (its rounding is far below every budget), so it takes Eigen's vectorised product.
template <class S>
Vec<S> naive_matvec(const Mat<S>& m, const Vec<S>& x) {
  if constexpr (std::is_same_v<S, double>) return m * x;
  Vec<S> y(m.rows());
  for (Eigen::Index r = 0; r < m.rows(); ++r) y(r) = naive_dot<S>(m.row(r), x);
  return y;
}

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// GELU, exact (with erf).
template <class S>
S gelu(S x) {
  return S(0.5) * x * (S(1) + std::erf(x / std::sqrt(S(2))));
}

// m = (fn @ flatten(X)) * rsqrt(mean(x^2) + norm_eps), then pre / post / Sinkhorn(comb).
template <class S>
Coefficients<S> hc_mixes(const Mat<S>& X, const Site<S>& site, const ResidualConfig& cfg) {
  const Eigen::Map<const Vec<S>> x(X.data(), X.size());  // row-major: stream-major flatten
  const S rs = S(1) / std::sqrt(naive_dot<S>(x, x) / S(x.size()) + S(cfg.norm_eps));
  const Vec<S> m = naive_matvec<S>(site.fn, x) * rs;
  const S eps = S(cfg.hc_eps);
  Coefficients<S> c;
  for (int i = 0; i < 4; ++i) {
    c.pre(i) = sigmoid(m(i) * site.scale(0) + site.base(i)) + eps;
    c.post(i) = S(2) * sigmoid(m(4 + i) * site.scale(1) + site.base(4 + i));
  }
  Mat4<S> logits;
  for (int j = 0; j < 4; ++j)
    for (int k = 0; k < 4; ++k)
      logits(j, k) = m(8 + 4 * j + k) * site.scale(2) + site.base(8 + 4 * j + k);
  c.comb = sinkhorn<S>(logits, cfg.sinkhorn_iters, eps);
  return c;
}

// u = sum_j pre_j X_j
template <class S>
Vec<S> collapse(const Mat<S>& X, const Vec4<S>& pre) {
  return X.transpose() * pre;
}

template <class S>
Vec<S> rms_norm(const Vec<S>& u, const Vec<S>& w, S eps) {
  const S rs = S(1) / std::sqrt(naive_dot<S>(u, u) / S(u.size()) + eps);
  return (u * rs).cwiseProduct(w);
}

// X'_k = post_k f + sum_j comb(j, k) X_j
template <class S>
Mat<S> hc_post(const Mat<S>& X, const Vec<S>& f, const Coefficients<S>& c) {
  return c.post * f.transpose() + c.comb.transpose() * X;
}

template <class S>
struct SiteResult {
  Mat<S> x_next;  // [4, d]
  Vec<S> y;       // [d] the sublayer input
  Vec4<S> pre;    // the pre this site's own input produced (for the next site under V4.1)
};

// The sublayer stand-in F: f = W y.
template <class S, class Act>
Vec<S> sublayer(const Site<S>& site, const Vec<S>& y) {
  return store_all<Act>(naive_matvec<S>(site.w_sub, y));
}

// V4: the site collapses with the pre computed from its own input (u is stored: separate pass).
template <class S, class Act>
SiteResult<S> v4_site(const Mat<S>& X, const Site<S>& site, const ResidualConfig& cfg) {
  const Coefficients<S> c = hc_mixes(X, site, cfg);
  const Vec<S> u = store_all<Act>(collapse(X, c.pre));
  const Vec<S> y = store_all<Act>(rms_norm(u, site.norm_w, S(cfg.norm_eps)));
  const Vec<S> f = sublayer<S, Act>(site, y);
  return {store_all<Act>(hc_post(X, f, c)), y, c.pre};
}

// V4.1: the site collapses with `pre_in`, made at the previous site; post and comb still come
// from its own input. The collapse is not stored (single pass).
template <class S, class Act>
SiteResult<S> shifted_site(const Mat<S>& X, const Vec4<S>& pre_in, const Site<S>& site,
                           const ResidualConfig& cfg) {
  const Coefficients<S> c = hc_mixes(X, site, cfg);
  const Vec<S> y = store_all<Act>(rms_norm(collapse(X, pre_in), site.norm_w, S(cfg.norm_eps)));
  const Vec<S> f = sublayer<S, Act>(site, y);
  return {store_all<Act>(hc_post(X, f, c)), y, c.pre};
}

struct ResidualRefOutputs {
  Tensor<double> x_out, y_out;
  std::vector<Tensor<double>> taps_y, taps_x;
};

// The whole stack, token by token, in the three-trip order. Precision: S/Act as above.
template <class S, class Act>
ResidualRefOutputs run_stack(const ResidualStackInputs& in, ResidualPath path);

// Truth (double, no rounding) and the naive baseline in the kernels' precision.
ResidualRefOutputs run_truth(const ResidualStackInputs& in, ResidualPath path);
ResidualRefOutputs run_baseline(const ResidualStackInputs& in, ResidualPath path);

// One boundary as run_residual_boundary defines it (optimized/residual.hpp), token by token:
// x (after site l's post when f is given), y (collapse with the carried pre, RMSNorm) and the
// opened site's coefficients [pre, post, comb] when next.fn is given. Empty outputs as there.
struct ResidualBoundaryRef {
  Tensor<double> x, y, coef;  // [T, 4, d], [T, d], [T, 24]
};
template <class S, class Act>
ResidualBoundaryRef residual_boundary(const ResidualBoundaryInputs& in);
ResidualBoundaryRef residual_boundary_truth(const ResidualBoundaryInputs& in);
ResidualBoundaryRef residual_boundary_baseline(const ResidualBoundaryInputs& in);

template <class S>
Site<S> to_site(const ResidualSiteWeights& w, int d);
template <class S>
Mat<S> token_state(const Tensor<float>& x, int64_t t, int d);

}  // namespace tandem::reference
