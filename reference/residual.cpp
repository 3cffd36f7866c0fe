#include "reference/residual.hpp"

namespace tandem::reference {

template <class S>
Site<S> to_site(const ResidualSiteWeights& w, int d) {
  auto mat = [](const Tensor<float>& t, int64_t rows, int64_t cols) {
    Mat<S> m(rows, cols);
    for (int64_t i = 0; i < rows * cols; ++i) m.data()[i] = static_cast<S>(t.data[i]);
    return m;
  };
  auto vec = [](const Tensor<float>& t) {
    return Vec<S>(Eigen::Map<const Eigen::VectorXf>(t.ptr(), t.size()).cast<S>());
  };
  Site<S> s{mat(w.fn, 24, 4 * int64_t{d}), vec(w.base), vec(w.scale), vec(w.norm_w), {}};
  if (!w.w_sub.data.empty()) s.w_sub = mat(w.w_sub, d, d);
  return s;
}

template <class S>
Mat<S> token_state(const Tensor<float>& x, int64_t t, int d) {
  Mat<S> X(4, d);
  for (int64_t i = 0; i < 4 * int64_t{d}; ++i) X.data()[i] = static_cast<S>(x.data[t * 4 * d + i]);
  return X;
}

namespace {

template <class S, class Derived>
void put_token(Tensor<double>& out, int64_t t, const Eigen::MatrixBase<Derived>& v) {
  const int64_t n = v.size();
  for (int64_t i = 0; i < n; ++i) out.data[t * n + i] = static_cast<double>(v.derived().data()[i]);
}

}  // namespace

template <class S, class Act>
ResidualRefOutputs run_stack(const ResidualStackInputs& in, ResidualPath path) {
  const ResidualConfig& cfg = in.cfg;
  const int d = cfg.d;
  const int64_t T = in.x0.dim(0);
  std::vector<Site<S>> sites;
  for (const auto& w : in.sites) sites.push_back(to_site<S>(w, d));
  const Site<S> head = to_site<S>(in.head, d);

  ResidualRefOutputs out{Tensor<double>({T, 4, d}), Tensor<double>({T, d}), {}, {}};
  for (size_t l = 0; l < sites.size(); ++l) {
    out.taps_y.emplace_back(Shape{T, d});
    out.taps_x.emplace_back(Shape{T, 4, d});
  }
  for (int64_t t = 0; t < T; ++t) {
    Mat<S> X = token_state<S>(in.x0, t, d);
    Vec4<S> pre = Vec4<S>::UnitX();  // V4.1: the first site collapses with [1, 0, 0, 0]
    for (size_t l = 0; l < sites.size(); ++l) {
      const SiteResult<S> r = path == ResidualPath::v4_unfused
                                  ? v4_site<S, Act>(X, sites[l], cfg)
                                  : shifted_site<S, Act>(X, pre, sites[l], cfg);
      put_token<S>(out.taps_y[l], t, r.y);
      put_token<S>(out.taps_x[l], t, r.x_next);
      X = r.x_next;
      pre = r.pre;
    }
    // Final collapse: V4 with the head's own pre, V4.1 with the last site's pre.
    if (path == ResidualPath::v4_unfused) {
      const Vec<S> u = store_all<Act>(collapse(X, hc_mixes(X, head, cfg).pre));
      put_token<S>(out.y_out, t, store_all<Act>(rms_norm(u, head.norm_w, S(cfg.norm_eps))));
    } else {
      put_token<S>(out.y_out, t,
                   store_all<Act>(rms_norm(collapse(X, pre), head.norm_w, S(cfg.norm_eps))));
    }
    put_token<S>(out.x_out, t, X);
  }
  return out;
}

ResidualRefOutputs run_truth(const ResidualStackInputs& in, ResidualPath path) {
  return run_stack<double, double>(in, path);
}

ResidualRefOutputs run_baseline(const ResidualStackInputs& in, ResidualPath path) {
  return in.act == ActDType::f32 ? run_stack<float, float>(in, path)
                                 : run_stack<float, bf16>(in, path);
}

template <class S, class Act>
ResidualBoundaryRef residual_boundary(const ResidualBoundaryInputs& in) {
  const ResidualConfig& cfg = in.cfg;
  const int d = cfg.d;
  const int64_t T = in.x.dim(0);
  const bool close = !in.f.data.empty(), open = !in.next.norm_w.data.empty();
  const bool mixes = !in.next.fn.data.empty();
  Site<S> next;
  if (mixes) next = to_site<S>(in.next, d);
  if (open) next.norm_w = Eigen::Map<const Eigen::VectorXf>(in.next.norm_w.ptr(), d).cast<S>();
  ResidualBoundaryRef out{Tensor<double>({T, 4, d}),
                          open ? Tensor<double>({T, d}) : Tensor<double>(),
                          mixes ? Tensor<double>({T, 24}) : Tensor<double>()};
  for (int64_t t = 0; t < T; ++t) {
    Mat<S> X = token_state<S>(in.x, t, d);
    Coefficients<S> c{Vec4<S>::UnitX(), Vec4<S>::Zero(), Mat4<S>::Zero()};
    if (!in.coef.data.empty()) {
      const float* k = in.coef.ptr() + t * 24;
      for (int i = 0; i < 4; ++i) c.pre(i) = S(k[i]), c.post(i) = S(k[4 + i]);
      for (int i = 0; i < 16; ++i) c.comb(i / 4, i % 4) = S(k[8 + i]);
    }
    if (close) {
      const Vec<S> f = Eigen::Map<const Eigen::VectorXf>(in.f.ptr() + t * d, d).cast<S>();
      X = store_all<Act>(hc_post(X, f, c));
    }
    put_token<S>(out.x, t, X);
    if (open)
      put_token<S>(out.y, t,
                   store_all<Act>(rms_norm(collapse(X, c.pre), next.norm_w, S(cfg.norm_eps))));
    if (mixes) {
      const Coefficients<S> m = hc_mixes(X, next, cfg);
      Eigen::Matrix<S, 24, 1> k;
      k << m.pre, m.post, Eigen::Map<const Eigen::Matrix<S, 16, 1>>(m.comb.data());  // row-major
      put_token<S>(out.coef, t, k);
    }
  }
  return out;
}

ResidualBoundaryRef residual_boundary_truth(const ResidualBoundaryInputs& in) {
  return residual_boundary<double, double>(in);
}

ResidualBoundaryRef residual_boundary_baseline(const ResidualBoundaryInputs& in) {
  return in.act == ActDType::f32 ? residual_boundary<float, float>(in)
                                 : residual_boundary<float, bf16>(in);
}

template Site<double> to_site<double>(const ResidualSiteWeights&, int);
template Site<float> to_site<float>(const ResidualSiteWeights&, int);
template Mat<double> token_state<double>(const Tensor<float>&, int64_t, int);
template Mat<float> token_state<float>(const Tensor<float>&, int64_t, int);
template ResidualRefOutputs run_stack<double, double>(const ResidualStackInputs&, ResidualPath);

}  // namespace tandem::reference
