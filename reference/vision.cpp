#include "reference/vision.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "reference/residual.hpp"  // Mat, Vec, naive_matvec, gelu

namespace tandem::reference {

double keys_cubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
  return 0;
}

std::vector<ResampleTaps> bicubic_taps(int64_t in, int64_t out) {
  const double scale = double(in) / double(out), stretch = std::max(scale, 1.0);
  const double support = 2 * stretch, inv = 1 / stretch;  // PIL multiplies by 1/stretch
  std::vector<ResampleTaps> taps(out);
  for (int64_t i = 0; i < out; ++i) {
    const double centre = (i + 0.5) * scale;
    // PIL's (int) casts truncate toward zero; a negative first tap clips to 0 either way.
    const int64_t first = std::max<int64_t>(static_cast<int64_t>(centre - support + 0.5), 0);
    const int64_t last = std::min<int64_t>(static_cast<int64_t>(centre + support + 0.5), in);
    ResampleTaps& t = taps[i];
    t.first = first;
    for (int64_t j = first; j < last; ++j)
      t.weights.push_back(keys_cubic((j - centre + 0.5) * inv));
    const double sum = std::accumulate(t.weights.begin(), t.weights.end(), 0.0);
    for (double& w : t.weights) w /= sum;
  }
  return taps;
}

namespace {

// One separable pass over `lines` lines of RGB pixels: out[line, i] = clip(sum_k w_k
// in[line, first_i + k]), pixel (line, index) at line * line_stride + index * step. The sum is
// taken as the first tap plus weighted differences from it (equal, as the weights sum to 1), so a
// constant input stays exactly constant although the rounded weights sum to 1 only nearly.
struct Layout {
  int64_t line_stride, step;
  int64_t at(int64_t line, int64_t index) const { return (line * line_stride + index * step) * 3; }
};
template <class In>
void resample_pass(const In* in, Layout from, double* out, Layout to, int64_t lines,
                   const std::vector<ResampleTaps>& taps) {
  for (int64_t line = 0; line < lines; ++line)
    for (size_t i = 0; i < taps.size(); ++i)
      for (int c = 0; c < 3; ++c) {
        const double first = in[from.at(line, taps[i].first) + c];
        double v = 0;
        for (size_t k = 0; k < taps[i].weights.size(); ++k)
          v += taps[i].weights[k] * (in[from.at(line, taps[i].first + int64_t(k)) + c] - first);
        v += first;
        out[to.at(line, int64_t(i)) + c] = std::clamp(v, 0.0, 255.0);
      }
}

}  // namespace

Tensor<double> resize_bicubic(const Tensor<uint8_t>& rgb, int64_t w, int64_t h) {
  const int64_t ih = rgb.dim(0), iw = rgb.dim(1);
  // Horizontal (PIL's order): each input row becomes w wide; then each column of that h tall.
  Tensor<double> rows({ih, w, 3}), out({h, w, 3});
  resample_pass(rgb.ptr(), {iw, 1}, rows.ptr(), {w, 1}, ih, bicubic_taps(iw, w));
  resample_pass(rows.ptr(), {1, w}, out.ptr(), {1, w}, w, bicubic_taps(ih, h));
  return out;
}

Tensor<float> preprocess(const Tensor<uint8_t>& rgb, const VisionGeometry& g) {
  require_content(g);
  const Tensor<double> content = resize_bicubic(rgb, g.content_w, g.content_h);
  // (x/255 - 0.5)/0.5 rounded to float, then to bf16: the release's float tensor cast to bf16.
  auto normalise = [](double v) {
    return bf16_decode(bf16_encode(static_cast<float>((v / 255.0 - 0.5) / 0.5)));
  };
  Tensor<float> out({g.canvas_h, g.canvas_w, 3}, normalise(127));  // the gray around the image
  for (int64_t y = 0; y < g.content_h; ++y)
    for (int64_t x = 0; x < g.content_w; ++x)
      for (int c = 0; c < 3; ++c)
        out.data[((g.content_y + y) * g.canvas_w + g.content_x + x) * 3 + c] =
            normalise(content.data[(y * g.content_w + x) * 3 + c]);
  return out;
}

Tensor<float> patchify(const Tensor<float>& image) {
  const int64_t gh = image.dim(0) / kPatch, gw = image.dim(1) / kPatch, W = image.dim(1);
  const int64_t P = 3 * kPatch * kPatch;
  Tensor<float> p({gh, gw, P});
  for (int64_t gy = 0; gy < gh; ++gy)
    for (int64_t gx = 0; gx < gw; ++gx)
      for (int c = 0; c < 3; ++c)
        for (int py = 0; py < kPatch; ++py)
          for (int px = 0; px < kPatch; ++px)
            p.data[(gy * gw + gx) * P + c * kPatch * kPatch + py * kPatch + px] =
                image.data[((gy * kPatch + py) * W + gx * kPatch + px) * 3 + c];
  return p;
}

template <class S>
Tensor<double> patch_embedding(const Tensor<float>& patches, const Tensor<float>& w) {
  const int64_t n = patches.dim(0) * patches.dim(1), P = patches.dim(2), C = w.dim(0);
  const Mat<S> W = Eigen::Map<const Mat<float>>(w.ptr(), C, P).cast<S>();
  Tensor<double> out({patches.dim(0), patches.dim(1), C});
  for (int64_t i = 0; i < n; ++i) {
    const Vec<S> y =
        naive_matvec<S>(W, Eigen::Map<const Vec<float>>(patches.ptr() + i * P, P).cast<S>());
    for (int64_t o = 0; o < C; ++o) out.data[i * C + o] = double(y(o));
  }
  return out;
}

template <class S>
Tensor<double> rope_2d(const RopeInputs& in) {
  const int64_t N = in.x.dim(0), H = in.x.dim(1), hd = in.x.dim(2), rope = hd / 2, half = rope / 2;
  Tensor<double> out(in.x.shape);
  std::vector<S> inv_freq(half);
  for (int64_t j = 0; j < half; ++j)
    inv_freq[j] = static_cast<S>(std::pow(in.theta, -double(2 * j) / double(rope)));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      const float* x = in.x.ptr() + (n * H + h) * hd;
      double* o = out.ptr() + (n * H + h) * hd;
      for (int64_t i = 0; i < rope; ++i) {
        const S pos = static_cast<S>(i < half ? in.row[n] : in.col[n]);
        const S angle = pos * inv_freq[i % half];
        const S c = std::cos(angle), s = std::sin(angle), x1 = x[i], x2 = x[rope + i];
        o[i] = static_cast<double>(x1 * c - x2 * s);
        o[rope + i] = static_cast<double>(x2 * c + x1 * s);
      }
    }
  }
  return out;
}
template Tensor<double> rope_2d<double>(const RopeInputs&);
template Tensor<double> rope_2d<float>(const RopeInputs&);

template <class T>
Tensor<T> unshuffle(const Tensor<T>& grid) {
  const int64_t h = grid.dim(0), w = grid.dim(1), C = grid.dim(2);
  const int64_t th = (h + 2) / 3, tw = (w + 2) / 3;
  Tensor<T> out({th * tw, 9 * C}, T{});
  for (int64_t ti = 0; ti < th; ++ti)
    for (int64_t tj = 0; tj < tw; ++tj)
      for (int64_t c = 0; c < C; ++c)
        for (int ki = 0; ki < 3; ++ki)
          for (int kj = 0; kj < 3; ++kj) {
            const int64_t y = 3 * ti + ki, x = 3 * tj + kj;
            if (y < h && x < w)
              out.data[(ti * tw + tj) * 9 * C + c * 9 + ki * 3 + kj] =
                  grid.data[(y * w + x) * C + c];
          }
  return out;
}

template <class T>
Tensor<T> unshuffle_inverse(const Tensor<T>& tokens, int64_t h, int64_t w) {
  const int64_t C = tokens.dim(1) / 9, tw = (w + 2) / 3;
  Tensor<T> grid({h, w, C});
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < C; ++c)
        grid.data[(y * w + x) * C + c] =
            tokens.data[((y / 3) * tw + x / 3) * 9 * C + c * 9 + (y % 3) * 3 + x % 3];
  return grid;
}
template Tensor<float> unshuffle<float>(const Tensor<float>&);
template Tensor<double> unshuffle<double>(const Tensor<double>&);
template Tensor<float> unshuffle_inverse<float>(const Tensor<float>&, int64_t, int64_t);

template <class S>
Tensor<double> aligner(const Tensor<double>& x, const Tensor<double>& w1, const Tensor<double>& b1,
                       const Tensor<double>& w2, const Tensor<double>& b2) {
  auto mat = [](const Tensor<double>& t) {
    return Mat<S>(Eigen::Map<const Mat<double>>(t.ptr(), t.dim(0), t.dim(1)).cast<S>());
  };
  auto vec = [](const Tensor<double>& t, int64_t offset, int64_t n) {
    return Vec<S>(Eigen::Map<const Vec<double>>(t.ptr() + offset, n).cast<S>());
  };
  const Mat<S> W1 = mat(w1), W2 = mat(w2);
  const int64_t N = x.dim(0), K = x.dim(1), out = w2.dim(0);
  Tensor<double> y({N, out});
  for (int64_t i = 0; i < N; ++i) {
    const Vec<S> hidden =
        (naive_matvec<S>(W1, vec(x, i * K, K)) + vec(b1, 0, b1.size())).unaryExpr([](S v) {
          return gelu(v);
        });
    const Vec<S> o = naive_matvec<S>(W2, hidden) + vec(b2, 0, b2.size());
    for (int64_t j = 0; j < out; ++j) y.data[i * out + j] = double(o(j));
  }
  return y;
}

template Tensor<double> patch_embedding<double>(const Tensor<float>&, const Tensor<float>&);
template Tensor<double> patch_embedding<float>(const Tensor<float>&, const Tensor<float>&);
template Tensor<double> aligner<double>(const Tensor<double>&, const Tensor<double>&,
                                        const Tensor<double>&, const Tensor<double>&,
                                        const Tensor<double>&);
template Tensor<double> aligner<float>(const Tensor<double>&, const Tensor<double>&,
                                       const Tensor<double>&, const Tensor<double>&,
                                       const Tensor<double>&);

namespace {

template <class S>
S gate_score(float logit) {  // s = sqrt(softplus(logit))
  const S l = static_cast<S>(logit);
  return std::sqrt(l > S(20) ? l : std::log1p(std::exp(l)));
}

}  // namespace

template <class S>
Tensor<double> moe_weights(const MoeGateInputs& in, const Tensor<int32_t>& experts) {
  const int64_t T = experts.dim(0), k = experts.dim(1), E = in.logits.dim(1);
  Tensor<double> w({T, k});
  for (int64_t t = 0; t < T; ++t) {
    S sum = 0;
    for (int64_t j = 0; j < k; ++j)
      sum += gate_score<S>(in.logits.data[t * E + experts.data[t * k + j]]);
    for (int64_t j = 0; j < k; ++j)
      w.data[t * k + j] =
          static_cast<double>(gate_score<S>(in.logits.data[t * E + experts.data[t * k + j]]) /
                              (sum + S(1e-20)) * S(in.route_scale));
  }
  return w;
}

template <class S>
MoeGateRef moe_gate(const MoeGateInputs& in) {
  validate_moe_gate_inputs(in);  // a table entry or id past its range is refused, never read
  const int64_t T = in.logits.dim(0), E = in.logits.dim(1), k = in.top_k;
  MoeGateRef r{Tensor<int32_t>({T, k}), {}};
  std::vector<S> biased(E);
  std::vector<int32_t> order(E);
  for (int64_t t = 0; t < T; ++t) {
    if (in.hashes() && !in.is_image[t]) {  // the token's row, as the release indexes tid2eid
      std::copy_n(in.tid2eid.ptr() + in.token_ids[t] * k, k, r.experts.ptr() + t * k);
      continue;
    }
    const std::vector<float>& bias = in.is_image[t] ? in.bias_vl : in.bias_text;
    for (int64_t e = 0; e < E; ++e)
      biased[e] = gate_score<S>(in.logits.data[t * E + e]) + static_cast<S>(bias[e]);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return biased[a] > biased[b]; });
    for (int64_t j = 0; j < k; ++j) r.experts.data[t * k + j] = order[j];
  }
  r.weights = moe_weights<S>(in, r.experts);
  return r;
}
template MoeGateRef moe_gate<double>(const MoeGateInputs&);
template MoeGateRef moe_gate<float>(const MoeGateInputs&);
template Tensor<double> moe_weights<double>(const MoeGateInputs&, const Tensor<int32_t>&);

std::vector<double> expert_load(const Tensor<int32_t>& experts,
                                const std::vector<uint8_t>& is_image, bool image, int n_experts) {
  std::vector<double> load(n_experts, 0);
  for (int64_t t = 0; t < experts.dim(0); ++t)
    if (bool(is_image[t]) == image)
      for (int64_t j = 0; j < experts.dim(1); ++j) load[experts.data[t * experts.dim(1) + j]] += 1;
  return load;
}

void update_bias(std::vector<float>& bias, const std::vector<double>& load, float speed) {
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / load.size();
  for (size_t e = 0; e < bias.size(); ++e)
    bias[e] += speed * static_cast<float>((mean > load[e]) - (mean < load[e]));
}

}  // namespace tandem::reference
