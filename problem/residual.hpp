#pragma once
// The residual stack (V4 unfused / V4.1 single pass, DESIGN 5.1) as data: its inputs, weights and
// outputs, and their validation. Float tensors hold values of the activation dtype.
#include <string>
#include <type_traits>
#include <vector>

#include "core/residual_config.hpp"
#include "core/tensor.hpp"
#include "problem/dtype.hpp"
#include "problem/traffic.hpp"

namespace tandem {

enum class ResidualPath { v4_unfused, v41_single_pass };
const char* residual_path_name(ResidualPath p);

struct ResidualSiteWeights {
  Tensor<float> fn;      // [24, 4d]
  Tensor<float> base;    // [24]
  Tensor<float> scale;   // [3]
  Tensor<float> norm_w;  // [d]   RMSNorm weight of the site's collapse
  Tensor<float> w_sub;   // [d, d] the sublayer stand-in F (unused in the head)
};

struct ResidualStackInputs {
  ResidualConfig cfg;
  ActDType act = ActDType::f32;
  Tensor<float> x0;                        // [T, 4, d]
  std::vector<ResidualSiteWeights> sites;  // cfg.sites of them
  ResidualSiteWeights head;                // final collapse: V4 uses its fn/base/scale for pre;
                                           // both use its norm_w
};

// Every input tensor with its name (the golden blob's tensor names): x0, then each site's
// site{l}.fn, .base, .scale, .norm_w and .w_sub, then head.fn, .base, .scale and .norm_w (the
// head has no sublayer). Reading, size `sites` to cfg.sites first.
template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, ResidualStackInputs>
void for_each_tensor(Input& in, F&& f) {
  auto site = [&](auto& w, const std::string& prefix, bool sublayer) {
    f(prefix + ".fn", w.fn);
    f(prefix + ".base", w.base);
    f(prefix + ".scale", w.scale);
    f(prefix + ".norm_w", w.norm_w);
    if (sublayer) f(prefix + ".w_sub", w.w_sub);
  };
  f(std::string("x0"), in.x0);
  for (size_t l = 0; l < in.sites.size(); ++l) site(in.sites[l], "site" + std::to_string(l), true);
  site(in.head, "head", false);
}

struct ResidualStackOutputs {
  Tensor<float> x_out;                // [T, 4, d] after the last site
  Tensor<float> y_out;                // [T, d]    final normalised collapse
  std::vector<Tensor<float>> taps_y;  // per site: the sublayer input [T, d]
  std::vector<Tensor<float>> taps_x;  // per site: the state after it [T, 4, d]
  LaunchLog launches;                 // emu byte counts (empty on cuda)
};

// One boundary of the V4.1 recipe as the end-to-end model runs it, where sites are separated by
// real sublayers and Engram layers: closes site l (post/comb of `coef` applied to x and f) and
// opens the next site (collapse with the pre carried in `coef`, RMSNorm with next.norm_w, and the
// next site's coefficients when next.fn is given), in one pass when both happen.
//  f and coef given, next.norm_w empty: close only (before an Engram layer): x.
//  f and coef given: close and open (between sublayers; without next.fn: the head): x, y, coef.
//  f empty: open only (after an Engram layer, or the first site when coef is empty too:
//  pre = [1, 0, 0, 0]): y, coef; x is the input.
struct ResidualBoundaryInputs {
  ResidualConfig cfg;
  ActDType act = ActDType::f32;
  Tensor<float> x;           // [T, 4, d]
  Tensor<float> f;           // [T, d] or empty
  Tensor<float> coef;        // [T, 24] or empty
  ResidualSiteWeights next;  // norm_w [d] (or empty: close only); fn/base/scale (or empty)
};

struct ResidualBoundaryOutputs {
  Tensor<float> x;     // [T, 4, d]
  Tensor<float> y;     // [T, d]  (empty when closing only)
  Tensor<float> coef;  // [T, 24] (empty without next.fn)
  LaunchLog launches;  // emu byte counts (empty on cuda)
};

// RMSNorm of rows on their own (DSpark's main_norm over the projected target features, the
// attention's query LoRA norm, and without a gain its per-head query norm):
// y[t] = u[t] * rsqrt(mean(u[t]^2) + eps) (* w), one launch of residual_rmsnorm.
struct RmsNormInputs {
  ActDType act = ActDType::f32;
  Tensor<float> u;  // [T >= 1, d], d as residual.d (a multiple of 8 up to 12288)
  Tensor<float> w;  // [d], or empty: no gain
  double eps = 1e-6;
};
// The launch's name: "residual_rmsnorm", "nogain" for rows without a gain.
inline std::string rms_norm_launch_name(ActDType act, bool gain) {
  return launch_name("residual_rmsnorm", act, gain ? "" : "nogain");
}
struct RmsNormOutputs {
  Tensor<float> y;     // [T, d]
  LaunchLog launches;  // emu byte counts (empty on cuda)
};

// Validates shapes (BadInput naming the tensor) before anything runs.
void validate_residual_inputs(const ResidualStackInputs& in);
void validate_residual_boundary(const ResidualBoundaryInputs& in);
void validate_rms_norm(const RmsNormInputs& in);

}  // namespace tandem
