#include "problem/drafter.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/tensor_checks.hpp"

namespace tandem {
namespace {

void expect(const Tensor<float>& t, const Shape& s, const std::string& name) {
  if (t.shape != s)
    throw_bad_input("dspark drafter weight '{}': shape [{}] where [{}] is expected", name,
                    fmt::join(t.shape, ", "), fmt::join(s, ", "));
  require_finite(t, "dspark drafter weight", name);
}

void expect(const Projection& p, const Shape& s, const std::string& name) {
  if (const Tensor<float>* t = p.held()) return expect(*t, s, name);
  if (p.shape() != s)
    throw_bad_input("dspark drafter weight '{}': shape [{}] where [{}] is expected", name,
                    fmt::join(p.shape(), ", "), fmt::join(s, ", "));
}

// A seeded table of `count` matrices [rows, cols].
void expect_table(const std::vector<SeededMatrix>& t, int64_t count, const Shape& s,
                  const std::string& name) {
  if (int64_t(t.size()) != count)
    throw_bad_input("dspark drafter weight '{}': {} matrices where {} are expected", name, t.size(),
                    count);
  for (size_t e = 0; e < t.size(); ++e) expect(Projection(t[e]), s, fmt::format("{}[{}]", name, e));
}

void expect_site(const ResidualSiteWeights& w, int64_t d, const std::string& name) {
  expect(w.fn, {24, 4 * d}, name + ".fn");
  expect(w.base, {24}, name + ".base");
  expect(w.scale, {3}, name + ".scale");
  expect(w.norm_w, {d}, name + ".norm_w");
}

}  // namespace

void validate_drafter_weights(const DsparkConfig& c, int64_t feature_dim, const DrafterWeights& w) {
  if (!dspark_stage_shape_ok(c) || c.noise_id < 0 || c.noise_id >= c.vocab || feature_dim < 4 ||
      feature_dim % 4 || feature_dim > 3 * kDsparkMaxBackboneWidth || c.blocks < 1 ||
      c.window < 1 || c.gamma < 1 || c.gamma > kDsparkMaxDraft || c.markov_rank < 1 ||
      c.markov_rank > kMarkovMaxRank || !(c.norm_eps >= 0) || !std::isfinite(c.norm_eps))
    throw_bad_input(
        "dspark drafter: config not runnable (features {} a multiple of 4 up to {}, width {}, "
        "heads {}, top_k {} of {} experts, blocks {}, window {}, gamma {} in [1, {}], "
        "markov_rank {} in [1, {}], norm_eps {})",
        feature_dim, 3 * kDsparkMaxBackboneWidth, c.width, c.heads, c.top_k, c.experts, c.blocks,
        c.window, c.gamma, kDsparkMaxDraft, c.markov_rank, kMarkovMaxRank, c.norm_eps);
  const int64_t d = c.width, V = c.vocab, r = c.markov_rank, HD = int64_t(c.heads) * 512;
  const int64_t E = c.experts, F = c.expert_hidden;
  expect(w.main_proj, {d, feature_dim}, "main_proj");
  expect(w.main_norm, {d}, "main_norm");
  expect(Projection(w.embed), {V, d}, "embed");
  expect(w.head_norm, {d}, "head_norm");
  expect(w.unembed, {V, d}, "unembed");
  expect(w.markov_in, {V, r}, "markov_in");
  expect(w.markov_out, {r, V}, "markov_out");
  expect(w.confidence, {d + r}, "confidence");
  if (w.stages.size() != size_t(c.blocks))
    throw_bad_input("dspark drafter weights: {} stages where the config has {}", w.stages.size(),
                    c.blocks);
  for (size_t b = 0; b < w.stages.size(); ++b) {
    const DrafterWeights::Stage& st = w.stages[b];
    const std::string name = fmt::format("stage{}", b);
    expect_site(st.attn_site, d, name + ".attn_site");
    expect_site(st.ffn_site, d, name + ".ffn_site");
    const int64_t Rq = c.lora.q_rank, G = c.lora.o_groups, Ro = c.lora.o_rank;
    expect(st.attn.wq_a, {Rq, d}, name + ".wq_a");
    expect(st.attn.q_norm, {Rq}, name + ".q_norm");
    expect(st.attn.wq_b, {HD, Rq}, name + ".wq_b");
    expect(st.attn.wo_a, {G * Ro, HD / G}, name + ".wo_a");
    expect(st.attn.wo_b, {d, G * Ro}, name + ".wo_b");
    expect(st.attn.sinks, {c.heads}, name + ".sinks");
    expect(st.attn.window_wkv, {512, d}, name + ".window_wkv");
    expect(st.attn.window_norm, {512}, name + ".window_norm");
    expect(st.router, {E, d}, name + ".router");
    expect(Tensor<float>({int64_t(st.bias.size())}, st.bias), {E}, name + ".bias");
    expect_table(st.w_in, E + 1, {2 * F, d}, name + ".w_in");
    expect_table(st.w_out, E + 1, {d, F}, name + ".w_out");
  }
}

void validate_drafter_inputs(const DsparkConfig& c, int64_t feature_dim,
                             const Tensor<float>& features, int32_t last, int64_t first) {
  if (features.shape.size() != 2 || features.dim(1) != feature_dim)
    throw_bad_input("dspark drafter input 'features': expected [T, {}]", feature_dim);
  require_finite(features, "dspark drafter input", "features");
  if (last < 0 || last >= c.vocab)
    throw_bad_input("dspark drafter input 'last': {} is outside [0, {})", last, c.vocab);
  if (first < 0) throw_bad_input("dspark drafter input 'first': {} is negative", first);
}

}  // namespace tandem
