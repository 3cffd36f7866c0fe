#include "reference/dspark.hpp"

#include <algorithm>
#include <array>
#include <tuple>

#include "core/philox.hpp"

namespace tandem::reference {

namespace {

using BlockSums = std::array<float, 32>;

BlockSums block_sums(std::span<const float> w) {
  const int64_t V = static_cast<int64_t>(w.size()), block = (V + 31) / 32;
  BlockSums s{};
  for (int b = 0; b < 32; ++b)
    for (int64_t v = b * block; v < std::min(V, (b + 1) * block); ++v) s[b] += w[v];
  return s;
}

float total(const BlockSums& s) {
  float t = 0;
  for (float b : s) t += b;
  return t;
}

}  // namespace

float blocked_sum(std::span<const float> w) { return total(block_sums(w)); }

int32_t inverse_cdf(std::span<const float> w, float u) {
  const int64_t V = static_cast<int64_t>(w.size()), block = (V + 31) / 32;
  const BlockSums block_sum = block_sums(w);
  const float total = reference::total(block_sum);
  const float target = u * total;
  float before = 0;  // mass of the blocks before b
  for (int b = 0; b < 32; ++b) {
    if (before + block_sum[b] > target) {  // the first block passing the target, and only it
      float cum = before;
      for (int64_t v = b * block; v < std::min(V, (b + 1) * block); ++v)
        if ((cum += w[v]) > target) return static_cast<int32_t>(v);
      break;  // rounding: the rescan did not pass it
    }
    before += block_sum[b];
  }
  // Rounding left the target past every block or past the rescan: the last non-zero weight.
  for (int64_t v = V - 1; v >= 0; --v)
    if (w[v] > 0) return static_cast<int32_t>(v);
  return 0;
}

int32_t argmax(std::span<const float> p) {
  return static_cast<int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
}

VerifyOutputs dspark_verify(const VerifyInputs& in) {
  const int64_t R = in.requests, V = in.vocab, K = in.budget;
  VerifyOutputs out{std::vector<int32_t>(R), Tensor<int32_t>({R, K + 1}, -1), {}};
  std::vector<float> residual(V);
  for (int64_t r = 0; r < R; ++r) {
    auto target = [&](int64_t k) {
      return std::span<const float>(in.p_target.ptr() + (r * (K + 1) + k) * V, V);
    };
    auto draft = [&](int64_t k) {
      return std::span<const float>(in.p_draft.ptr() + (r * K + k) * V, V);
    };
    const int64_t k_r = in.drafted.empty() ? K : in.drafted[r];  // rows after k_r: padding
    const uint32_t id = in.request.empty() ? uint32_t(r) : in.request[r];
    int64_t k = 0;
    int32_t extra = -1;
    for (; k < k_r; ++k) {
      const int32_t x = in.draft.data[r * K + k];
      const uint32_t pos = in.position[r] + static_cast<uint32_t>(k);
      if (in.greedy) {
        if (x == argmax(target(k))) continue;
        extra = argmax(target(k));
        break;
      }
      const float u = philox_uniform(philox_draw(in.seed, id, pos, 0).v[0]);
      if (accepts(u, draft(k)[x], target(k)[x])) continue;
      for (int64_t v = 0; v < V; ++v) residual[v] = std::max(0.0f, target(k)[v] - draft(k)[v]);
      const bool no_residual = blocked_sum(residual) <= kResidualMassFloor;
      extra = inverse_cdf(no_residual ? target(k) : std::span<const float>(residual),
                          philox_uniform(philox_draw(in.seed, id, pos, 1).v[0]));
      break;
    }
    if (k == k_r) {  // all accepted: the bonus token from the target distribution after them
      const uint32_t pos = in.position[r] + static_cast<uint32_t>(k_r);
      extra = in.greedy
                  ? argmax(target(k_r))
                  : inverse_cdf(target(k_r), philox_uniform(philox_draw(in.seed, id, pos, 1).v[0]));
    }
    out.accepted[r] = static_cast<int32_t>(k);
    for (int64_t j = 0; j < k; ++j) out.emitted.data[r * (K + 1) + j] = in.draft.data[r * K + j];
    out.emitted.data[r * (K + 1) + k] = extra;
  }
  return out;
}

std::vector<int> admit(const std::vector<std::vector<double>>& confidence, int capacity) {
  struct Candidate {
    double survival;
    int request, position;
  };
  std::vector<Candidate> c;
  for (int r = 0; r < int(confidence.size()); ++r) {
    double a = 1;
    for (int j = 0; j < int(confidence[r].size()); ++j) c.push_back({a *= confidence[r][j], r, j});
  }
  std::stable_sort(c.begin(), c.end(), [](const Candidate& x, const Candidate& y) {
    return std::tie(y.survival, x.request, x.position) <
           std::tie(x.survival, y.request, y.position);
  });
  std::vector<int> admitted(confidence.size(), 0);
  int taken = 0;
  for (size_t i = 0; i < c.size() && taken < capacity; ++i)
    if (admitted[c[i].request] == c[i].position)
      ++admitted[c[i].request], ++taken;  // prefix-closed
  return admitted;
}

Schedule schedule(const std::vector<std::vector<double>>& confidence,
                  const std::vector<double>& sps) {
  const int R = static_cast<int>(confidence.size());
  int max_b = 0;
  for (const auto& c : confidence) max_b += static_cast<int>(c.size());
  Schedule best;
  best.value = -1;
  for (int B = 0; B <= max_b && R + B < static_cast<int>(sps.size()); ++B) {
    const std::vector<int> admitted = admit(confidence, B);
    double expected = R;
    for (int r = 0; r < R; ++r) {
      double a = 1;
      for (int j = 0; j < admitted[r]; ++j) expected += (a *= confidence[r][j]);
    }
    const double value = expected * sps[R + B];
    if (value > best.value) best = {B, admitted, value};
  }
  return best;
}

}  // namespace tandem::reference
