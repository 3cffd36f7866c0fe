// Host launchers for the residual kernels; compiled once per backend (nvcc -> cuda_backend,
// host compiler with TANDEM_EMU -> emu_backend) from this same source.
#include <memory>
#include <string>

#include "optimized/dense.cuh"
#include "optimized/device_array.cuh"
#include "optimized/residual.cuh"
#include "optimized/residual.hpp"  // host headers first: the emulator's macros come after
#include "problem/dense.hpp"       // dense_kmajor

namespace tandem::TANDEM_BACKEND_NS {
namespace {

// The kernels that stage a [d] row in dynamic shared memory set the attribute always, as Engram's
// gate does: with their static arrays, a row near kResidualMaxWidth passes CUDA's default 48 KiB.
template <class Kernel>
void allow_staged_row(Kernel kernel, size_t smem) {
  TANDEM_ALLOW_DYNAMIC_SHARED(kernel, smem);
}

// A site's weights on the device; absent tensors (no sublayer stand-in, no mixes at the head)
// get a poisoned one-element placeholder that no kernel variant reads.
struct SiteOnDevice {
  DeviceArray<float> fn, base, scale, norm_w, w_sub;
  explicit SiteOnDevice(const ResidualSiteWeights& w)
      : fn(on_device(w.fn)),
        base(on_device(w.base)),
        scale(on_device(w.scale)),
        norm_w(on_device(w.norm_w)),
        w_sub(on_device(w.w_sub)) {
    upload(fn, w.fn), upload(base, w.base), upload(scale, w.scale), upload(norm_w, w.norm_w);
    if (!w.w_sub.data.empty())  // as dense_rows reads it at this width
      w_sub.upload(dense_kmajor(w.w_sub.dim(1)) ? k_major(w.w_sub) : w.w_sub.data);
  }
  static size_t on_device(const Tensor<float>& t) { return std::max<size_t>(1, t.data.size()); }
  static void upload(DeviceArray<float>& a, const Tensor<float>& t) {
    if (!t.data.empty()) a.upload(t.data);
  }
};

template <class Act>
class StackRunner {
 public:
  StackRunner(const ResidualStackInputs& in, const RunOptions& opt)
      : in_(in),
        T_(static_cast<int>(in.x0.dim(0))),
        d_(in.cfg.d),
        p_{in.cfg.sinkhorn_iters, static_cast<float>(in.cfg.hc_eps),
           static_cast<float>(in.cfg.norm_eps)},
        grid_(T_),
        block_(opt.block_threads),
        smem_(sizeof(float) * d_),
        x_(size_t(T_) * kHc * d_),
        x_next_(x_.bytes() / sizeof(Act)),
        y_(size_t(T_) * d_),
        u_(size_t(T_) * d_),
        f_(size_t(T_) * d_),
        coef_(size_t(T_) * kMixes),
        coef_next_(size_t(T_) * kMixes),
        head_(in.head) {
    for (const auto& s : in.sites) sites_.emplace_back(std::make_unique<SiteOnDevice>(s));
    x_.upload(to_storage<Act>(in.x0));
  }

  ResidualStackOutputs run(ResidualPath path) {
    if (path == ResidualPath::v4_unfused)
      run_v4();
    else
      run_v41();
    out_.x_out = download_floats(x_, {T_, kHc, d_});
    out_.y_out = download_floats(y_, {T_, d_});
    return std::move(out_);
  }

 private:
  void sublayer(const SiteOnDevice& s) {
    auto launch = [&](auto kernel) {
      TANDEM_LAUNCH(name("dense_rows").c_str(), kernel, grid_, block_, smem_, y_.data(),
                    s.w_sub.data(), nullptr, d_, d_, 1, f_.data());
    };
    if (dense_kmajor(d_))
      launch(dense_rows<Act, false, false, true>);
    else
      launch(dense_rows<Act, false, false, false>);
  }
  void mixes(const SiteOnDevice& s) {
    TANDEM_LAUNCH(name("residual_mixes").c_str(), residual_mixes<Act>, grid_, block_, 0, x_.data(),
                  s.fn.data(), s.base.data(), s.scale.data(), p_, d_, coef_.data());
  }
  void collapse_and_norm(const SiteOnDevice& s) {
    TANDEM_LAUNCH(name("residual_collapse").c_str(), residual_collapse<Act>, grid_, block_, 0,
                  x_.data(), coef_.data(), d_, u_.data());
    auto* const norm = residual_rmsnorm<Act, true>;
    allow_staged_row(norm, smem_);
    TANDEM_LAUNCH(name("residual_rmsnorm").c_str(), norm, grid_, block_, smem_, u_.data(),
                  s.norm_w.data(), p_.norm_eps, d_, y_.data());
  }
  void post() {
    TANDEM_LAUNCH(name("residual_post").c_str(), residual_post<Act>, grid_, block_, 0, x_.data(),
                  f_.data(), coef_.data(), d_, x_next_.data());
    swap(x_, x_next_);
  }

  // V4: every site computes its own mixes, then collapse, norm, F, post: four passes.
  void run_v4() {
    for (const auto& s : sites_) {
      mixes(*s);
      collapse_and_norm(*s);
      tap_y();
      sublayer(*s);
      post();
      tap_x();
    }
    mixes(head_);
    collapse_and_norm(head_);
  }

  // V4.1: one kernel per site boundary; the first site collapses with pre = [1,0,0,0].
  void run_v41() {
    const auto& first = *sites_.front();
    auto first_kernel = residual_single_pass<Act, false, true>;
    allow_staged_row(first_kernel, smem_);
    TANDEM_LAUNCH(name("residual_single_pass", "first").c_str(), first_kernel, grid_, block_, smem_,
                  x_.data(), nullptr, nullptr, first.fn.data(), first.base.data(),
                  first.scale.data(), p_, first.norm_w.data(), d_, nullptr, y_.data(),
                  coef_.data());
    for (size_t l = 0; l < sites_.size(); ++l) {
      tap_y();
      sublayer(*sites_[l]);
      const bool last = l + 1 == sites_.size();
      const SiteOnDevice& next = last ? head_ : *sites_[l + 1];
      auto kernel =
          last ? residual_single_pass<Act, true, false> : residual_single_pass<Act, true, true>;
      allow_staged_row(kernel, smem_);
      TANDEM_LAUNCH(name("residual_single_pass", last ? "last" : "boundary").c_str(), kernel, grid_,
                    block_, smem_, x_.data(), f_.data(), coef_.data(), next.fn.data(),
                    next.base.data(), next.scale.data(), p_, next.norm_w.data(), d_, x_next_.data(),
                    y_.data(), coef_next_.data());
      swap(x_, x_next_);
      swap(coef_, coef_next_);
      tap_x();
    }
  }

  void tap_y() { out_.taps_y.push_back(download_floats(y_, {T_, d_})); }
  void tap_x() { out_.taps_x.push_back(download_floats(x_, {T_, kHc, d_})); }
  static std::string name(const char* kernel, const char* variant = "") {
    return launch_name(kernel, act_dtype_of<Act>(), variant);
  }

  const ResidualStackInputs& in_;
  int T_, d_;
  SinkhornParams p_;
  dim3 grid_, block_;
  size_t smem_;
  DeviceArray<Act> x_, x_next_, y_, u_, f_;
  DeviceArray<float> coef_, coef_next_;
  std::vector<std::unique_ptr<SiteOnDevice>> sites_;
  SiteOnDevice head_;
  ResidualStackOutputs out_;
};

template <class Act>
class BoundaryRunner {
 public:
  BoundaryRunner(const ResidualBoundaryInputs& in, const RunOptions& opt)
      : in_(in),
        T_(in.x.dim(0)),
        d_(in.cfg.d),
        x_(in.x.data.size()),
        f_(std::max<size_t>(1, in.f.data.size())),
        coef_(std::max<size_t>(1, in.coef.data.size())),
        opt_(opt) {
    x_.upload(to_storage<Act>(in.x));
    if (!in.f.data.empty()) f_.upload(to_storage<Act>(in.f));
    if (!in.coef.data.empty()) coef_.upload(in.coef.data);
  }

  ResidualBoundaryOutputs run() {
    ResidualBoundaryOutputs out;
    const bool close = !in_.f.data.empty(), open = !in_.next.norm_w.data.empty();
    DeviceArray<Act> x_next(x_.bytes() / sizeof(Act));
    if (!open) {
      TANDEM_LAUNCH(name("residual_post").c_str(), residual_post<Act>, dim3(T_),
                    dim3(opt_.block_threads), 0, x_.data(), f_.data(), coef_.data(), d_,
                    x_next.data());
      out.x = download_floats(x_next, {T_, kHc, d_});
      return out;
    }
    const bool mixes = !in_.next.fn.data.empty();
    SiteOnDevice next(in_.next);
    DeviceArray<Act> y(size_t(T_) * d_);
    DeviceArray<float> coef_next(size_t(T_) * kMixes);
    const SinkhornParams p{in_.cfg.sinkhorn_iters, float(in_.cfg.hc_eps), float(in_.cfg.norm_eps)};
    const char* variant = close ? (mixes ? "boundary" : "last") : "open";
    allow_staged_row(kernel(close, mixes), sizeof(float) * d_);
    TANDEM_LAUNCH(name("residual_single_pass", variant).c_str(), kernel(close, mixes), dim3(T_),
                  dim3(opt_.block_threads), sizeof(float) * d_, x_.data(),
                  close ? f_.data() : nullptr, in_.coef.data.empty() ? nullptr : coef_.data(),
                  next.fn.data(), next.base.data(), next.scale.data(), p, next.norm_w.data(), d_,
                  close ? x_next.data() : nullptr, y.data(), mixes ? coef_next.data() : nullptr);
    out.x = close ? download_floats(x_next, {T_, kHc, d_}) : in_.x;
    out.y = download_floats(y, {T_, d_});
    if (mixes) out.coef = download_floats(coef_next, {T_, kMixes});
    return out;
  }

 private:
  using Kernel = void (*)(const Act*, const Act*, const float*, const float*, const float*,
                          const float*, SinkhornParams, const float*, int, Act*, Act*, float*);
  static Kernel kernel(bool close, bool mixes) {
    if (close)
      return mixes ? residual_single_pass<Act, true, true> : residual_single_pass<Act, true, false>;
    return mixes ? residual_single_pass<Act, false, true> : residual_single_pass<Act, false, false>;
  }
  static std::string name(const char* kernel, const char* variant = "") {
    return launch_name(kernel, act_dtype_of<Act>(), variant);
  }

  const ResidualBoundaryInputs& in_;
  int T_, d_;
  DeviceArray<Act> x_, f_;
  DeviceArray<float> coef_;
  const RunOptions& opt_;
};

template <class Act>
RmsNormOutputs rms_norm_rows(const RmsNormInputs& in, const RunOptions& opt) {
  const int T = int(in.u.dim(0)), d = int(in.u.dim(1));
  DeviceArray<Act> u(in.u.data.size()), y(in.u.data.size());
  const bool gain = !in.w.data.empty();
  DeviceArray<float> w(std::max<size_t>(1, in.w.data.size()));
  u.upload(to_storage<Act>(in.u));
  if (gain) w.upload(in.w.data);
  auto launch = [&](auto kernel) {
    allow_staged_row(kernel, sizeof(float) * d);
    TANDEM_LAUNCH(rms_norm_launch_name(act_dtype_of<Act>(), gain).c_str(), kernel, dim3(T),
                  dim3(opt.block_threads), sizeof(float) * d, u.data(), w.data(), float(in.eps), d,
                  y.data());
  };
  if (gain)
    launch(residual_rmsnorm<Act, true>);
  else
    launch(residual_rmsnorm<Act, false>);
  return {download_floats(y, {T, d}), {}};
}

}  // namespace

RmsNormOutputs run_rms_norm_rows(const RmsNormInputs& in, const RunOptions& opt) {
  begin_run(opt);
  RmsNormOutputs out =
      in.act == ActDType::f32 ? rms_norm_rows<float>(in, opt) : rms_norm_rows<bf16>(in, opt);
  out.launches = end_run();
  return out;
}

ResidualBoundaryOutputs run_residual_boundary(const ResidualBoundaryInputs& in,
                                              const RunOptions& opt) {
  begin_run(opt);
  ResidualBoundaryOutputs out = in.act == ActDType::f32 ? BoundaryRunner<float>(in, opt).run()
                                                        : BoundaryRunner<bf16>(in, opt).run();
  out.launches = end_run();
  return out;
}

ResidualStackOutputs run_residual_stack(const ResidualStackInputs& in, ResidualPath path,
                                        const RunOptions& opt) {
  begin_run(opt);
  ResidualStackOutputs out = in.act == ActDType::f32 ? StackRunner<float>(in, opt).run(path)
                                                     : StackRunner<bf16>(in, opt).run(path);
  out.launches = end_run();
  return out;
}

}  // namespace tandem::TANDEM_BACKEND_NS
