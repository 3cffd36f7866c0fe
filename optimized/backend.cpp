#include "optimized/backend.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <string_view>
#include <tuple>

#include "core/error.hpp"
#include "optimized/attention.hpp"
#include "optimized/dense.hpp"
#include "optimized/dspark.hpp"
#include "optimized/engram.hpp"
#include "optimized/moe.hpp"
#include "optimized/residual.hpp"
#include "optimized/vision.hpp"

#if defined(TANDEM_WITH_CUDA)
#include <cuda_runtime.h>
#endif

// Runs fn on the backend `opt` selects; without CUDA in the build, cuda is bad input.
#if defined(TANDEM_WITH_CUDA)
#define TANDEM_CUDA_OR_THROW(fn, ...) cuda_backend::fn(__VA_ARGS__)
#else
#define TANDEM_CUDA_OR_THROW(fn, ...) throw BadInput("backend cuda: " + cuda_status().detail)
#endif
#define TANDEM_DISPATCH(opt, fn, ...)                           \
  ((opt).backend == Backend::emu ? emu_backend::fn(__VA_ARGS__) \
                                 : TANDEM_CUDA_OR_THROW(fn, __VA_ARGS__))

namespace tandem {

const char* backend_name(Backend b) { return b == Backend::cuda ? "cuda" : "emu"; }

BackendStatus cuda_status() {
#if defined(TANDEM_WITH_CUDA)
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess)
    return {false, fmt::format("no CUDA device: {}", cudaGetErrorString(err))};
  if (count == 0) return {false, "no CUDA device: cudaGetDeviceCount found 0"};
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
    return {false, "cudaGetDeviceProperties failed"};
  return {true, fmt::format("{} (sm_{}{}, {} GiB)", prop.name, prop.major, prop.minor,
                            prop.totalGlobalMem >> 30)};
#else
  return {false, "built without CUDA (CPU-only build)"};
#endif
}

Backend best_backend() { return cuda_status().available ? Backend::cuda : Backend::emu; }

const char* residual_path_name(ResidualPath p) {
  return p == ResidualPath::v4_unfused ? "v4-unfused" : "v41-single-pass";
}
const char* act_dtype_name(ActDType a) { return a == ActDType::f32 ? "f32" : "bf16"; }
size_t act_bytes(ActDType a) { return a == ActDType::f32 ? 4 : 2; }

void validate_block_threads(const RunOptions& opt, int max, std::string_view why) {
  if (opt.block_threads < 32 || opt.block_threads > max || opt.block_threads % 32)
    throw_bad_input("--block-threads: a multiple of 32 in [32, {}] ({}), got {}", max, why,
                    opt.block_threads);
}

namespace {

void expect_shape(const Tensor<float>& t, const Shape& s, const std::string& what) {
  if (t.shape != s)
    throw_bad_input("residual input '{}': shape [{}] where [{}] is expected", what,
                    fmt::join(t.shape, ", "), fmt::join(s, ", "));
}

// The config the kernels support and the state x: [T >= 1, 4, d]; returns T.
int64_t check_residual_state(const ResidualConfig& c, const Tensor<float>& x, const char* name) {
  const int64_t d = c.d;
  if (c.hc_mult != 4) throw_bad_input("residual.hc_mult: the kernels need 4, got {}", c.hc_mult);
  if (d <= 0 || d % 8 || d > 12288)
    throw_bad_input("residual.d: a multiple of 8 in [8, 12288], got {}", d);
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
  for (const Tensor<float>* t : {&in.x, &in.f, &in.coef})
    for (size_t i = 0; i < t->data.size(); ++i)
      if (!std::isfinite(t->data[i]))
        throw_bad_input("residual boundary input '{}'[{}] is not finite ({})",
                        t == &in.x   ? "x"
                        : t == &in.f ? "f"
                                     : "coef",
                        i, t->data[i]);
}

ResidualBoundaryOutputs run_residual_boundary(const ResidualBoundaryInputs& in,
                                              const RunOptions& opt) {
  validate_residual_boundary(in);
  validate_block_threads(opt, 256, "residual kernels use ~200 registers per thread");
  return TANDEM_DISPATCH(opt, run_residual_boundary, in, opt);
}

ResidualStackOutputs run_residual_stack(const ResidualStackInputs& in, ResidualPath path,
                                        const RunOptions& opt) {
  validate_residual_inputs(in);
  validate_block_threads(opt, 256, "residual kernels use ~200 registers per thread");
  return TANDEM_DISPATCH(opt, run_residual_stack, in, path, opt);
}

}  // namespace tandem

namespace tandem {

void validate_engram_inputs(const EngramInputs& in) {
  const EngramConfig& c = in.cfg;
  const int64_t T = static_cast<int64_t>(in.compressed.size()), d = c.d;
  const int64_t E = int64_t{c.lookups()} * c.head_dim;
  if (T < 1) throw_bad_input("engram input: no tokens");
  if (c.head_dim != 256 || c.lookups() > 24 || c.max_order > 4)
    throw_bad_input("engram config: the kernels need head_dim 256, max_order <= 4, <= 24 lookups");
  if (in.history.size() > static_cast<size_t>(kEngramHistory))
    throw_bad_input("engram input: history has {} ids, at most {}", in.history.size(),
                    kEngramHistory);
  for (int64_t id : in.compressed)
    if (id >= c.compressed_vocab)
      throw_bad_input("engram input: compressed id {} >= engram.compressed_vocab {}", id,
                      c.compressed_vocab);
  if (static_cast<int64_t>(in.table.size()) != in.tables.rows * c.row_bytes())
    throw_bad_input("engram input: table has {} bytes, {} rows x {} B expected", in.table.size(),
                    in.tables.rows, c.row_bytes());
  if (in.h.shape != Shape{T, 4, d}) throw_bad_input("engram input 'h': expected [{}, 4, {}]", T, d);
  if (in.wkv.shape != Shape{5 * d, E})
    throw_bad_input("engram input 'wkv': expected [{}, {}]", 5 * d, E);
  if (in.gate_w.shape != Shape{4, d}) throw_bad_input("engram input 'gate_w': expected [4, {}]", d);
  if (c.wkv_fp8_block != 0 && c.wkv_fp8_block != 32 && c.wkv_fp8_block != 128)
    throw_bad_input("engram config: wkv_fp8_block is 32, 128 or 0, got {}", c.wkv_fp8_block);
  if (sizeof(float) * (E + E / 32 + 9 * d) > (48u << 10))
    throw_bad_input(
        "engram config: lookups x 256 x 33/32 + 9d floats exceed 48 KiB of shared memory (d = "
        "{})",
        d);
}

EngramOutputs run_engram_layer(const EngramInputs& in, const RunOptions& opt) {
  validate_engram_inputs(in);
  return TANDEM_DISPATCH(opt, run_engram_layer, in, opt);
}

}  // namespace tandem

namespace tandem {

UnshuffleOutputs run_unshuffle(const Tensor<float>& grid, ActDType act, const RunOptions& opt) {
  if (grid.shape.size() != 3 || grid.size() == 0)
    throw_bad_input("vision unshuffle input: expected a non-empty [h, w, C] grid");
  if (grid.dim(0) * grid.dim(1) > (1 << 24) || grid.dim(2) > (1 << 16))
    throw_bad_input("vision unshuffle input: grid {}x{}x{} too large", grid.dim(0), grid.dim(1),
                    grid.dim(2));
  return TANDEM_DISPATCH(opt, run_unshuffle, grid, act, opt);
}

RopeOutputs run_rope_2d(const RopeInputs& in, ActDType act, const RunOptions& opt) {
  const int64_t N = in.x.shape.size() == 3 ? in.x.dim(0) : -1;
  if (N < 1 || in.x.dim(2) % 4 || in.row.size() != size_t(N) || in.col.size() != size_t(N))
    throw_bad_input(
        "vision rope input: expected x [N, heads, hd] with hd % 4 == 0 and N row/col positions");
  for (int64_t i = 0; i < N; ++i)
    if (in.row[i] < 0 || in.col[i] < 0 || in.row[i] > (1 << 20) || in.col[i] > (1 << 20))
      throw_bad_input("vision rope input: position ({}, {}) of token {} outside [0, 2^20]",
                      in.row[i], in.col[i], i);
  return TANDEM_DISPATCH(opt, run_rope_2d, in, act, opt);
}

MoeGateOutputs run_moe_gate(const MoeGateInputs& in, const RunOptions& opt) {
  const int64_t T = in.logits.shape.size() == 2 ? in.logits.dim(0) : -1;
  const int64_t E = T >= 0 ? in.logits.dim(1) : 0;
  if (T < 1 || E < 1 || E > 256)
    throw_bad_input("moe gate input: expected logits [T >= 1, 1 <= E <= 256]");
  if (in.top_k < 1 || in.top_k > 16 || in.top_k > E)
    throw_bad_input("moe gate: top_k must be in [1, min(16, E = {})], got {}", E, in.top_k);
  if (in.is_image.size() != size_t(T) || in.bias_text.size() != size_t(E) ||
      in.bias_vl.size() != size_t(E))
    throw_bad_input("moe gate input: is_image [T], bias_text [E] and bias_vl [E] expected");
  for (int64_t i = 0; i < in.logits.size(); ++i)
    if (!std::isfinite(in.logits.data[i]))
      throw_bad_input("moe gate input: logits[{}, {}] is not finite ({})", i / E, i % E,
                      in.logits.data[i]);
  return TANDEM_DISPATCH(opt, run_moe_gate, in, opt);
}

VerifyOutputs run_dspark_verify(const VerifyInputs& in, const RunOptions& opt) {
  const int64_t R = in.requests, V = in.vocab, K = in.budget;
  if (R < 1 || V < 1 || V > (int64_t{1} << 31) || K < 1 || K > kDsparkMaxDraft)
    throw_bad_input("dspark verify: requests >= 1, vocab in [1, 2^31], budget in [1, {}]",
                    kDsparkMaxDraft);
  if (in.draft.shape != Shape{R, K} || in.p_draft.shape != Shape{R, K, V} ||
      in.p_target.shape != Shape{R, K + 1, V} || in.position.size() != size_t(R))
    throw_bad_input(
        "dspark verify: expected draft [R, K], p_draft [R, K, V], p_target [R, K+1, V], position "
        "[R]");
  if (!in.drafted.empty() && in.drafted.size() != size_t(R))
    throw_bad_input("dspark verify: drafted holds {} counts for {} requests", in.drafted.size(), R);
  if (!in.request.empty() && in.request.size() != size_t(R))
    throw_bad_input("dspark verify: request holds {} ids for {} requests", in.request.size(), R);
  for (int64_t r = 0; r < int64_t(in.drafted.size()); ++r)
    if (in.drafted[r] < 0 || in.drafted[r] > K)
      throw_bad_input("dspark verify: drafted[{}] is {}, outside [0, budget {}]", r, in.drafted[r],
                      K);
  for (int64_t i = 0; i < in.draft.size(); ++i)  // padding too: every row must be a valid input
    if (in.draft.data[i] < 0 || in.draft.data[i] >= V)
      throw_bad_input("dspark verify: drafted token {} of request {} is {}, outside [0, {})", i % K,
                      i / K, in.draft.data[i], V);
  for (const auto& [name, p, rows] :
       {std::tuple{"p_draft", &in.p_draft, K}, std::tuple{"p_target", &in.p_target, K + 1}})
    for (int64_t i = 0; i < p->size(); ++i)
      if (!(p->data[i] >= 0.0f && p->data[i] <= 1.0f))
        throw_bad_input("dspark verify: {}[{}, {}, {}] is {} (a probability, must be in [0, 1])",
                        name, i / (rows * V), i / V % rows, i % V, p->data[i]);
  return TANDEM_DISPATCH(opt, run_dspark_verify, in, opt);
}

MoeExpertOutputs run_moe_experts(const MoeExpertInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  const int64_t T = in.y.shape.size() == 2 ? in.y.dim(0) : 0, d = T ? in.y.dim(1) : 0;
  if (T < 1 || d < 8 || d % 8 || d > 12288)
    throw_bad_input("moe experts input 'y': expected [T >= 1, d], d a multiple of 8 in [8, 12288]");
  if (in.w_in.shape.size() != 3 || in.w_in.dim(2) != d || in.w_in.dim(1) % 4 ||
      in.w_in.dim(1) < 4 || in.w_in.dim(1) > 16384)
    throw_bad_input(
        "moe experts input 'w_in': expected [E, H, {}], H a multiple of 4 in [4, 16384]", d);
  const int64_t E = in.w_in.dim(0), H = in.w_in.dim(1);
  if (in.w_out.shape != Shape{E, d, H})
    throw_bad_input("moe experts input 'w_out': expected [{}, {}, {}]", E, d, H);
  if (in.experts.shape.size() != 2 || in.experts.dim(0) != T || in.experts.dim(1) < 1 ||
      in.weights.shape != in.experts.shape)
    throw_bad_input("moe experts inputs 'experts', 'weights': expected [{}, k >= 1] each", T);
  const int64_t k = in.experts.dim(1);
  for (int64_t i = 0; i < in.experts.size(); ++i) {
    if (in.experts.data[i] < 0 || in.experts.data[i] >= E)
      throw_bad_input("moe experts input 'experts'[{}, {}] is {}, outside [0, {})", i / k, i % k,
                      in.experts.data[i], E);
    if (!std::isfinite(in.weights.data[i]))
      throw_bad_input("moe experts input 'weights'[{}, {}] is not finite ({})", i / k, i % k,
                      in.weights.data[i]);
  }
  return TANDEM_DISPATCH(opt, run_moe_experts, in, opt);
}

DenseOutputs run_dense_rows(const DenseInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  const int64_t pack = 16 / int64_t(act_bytes(in.act));  // one 16-byte load of activations
  if (in.x.shape.size() != 2 || in.x.dim(0) < 1 || in.x.dim(1) < pack || in.x.dim(1) % pack ||
      in.x.dim(1) > kDenseMaxInputs)
    throw_bad_input(
        "dense input 'x': expected [T >= 1, n_in], n_in a multiple of {} ({}) in "
        "[{}, {}]",
        pack, act_dtype_name(in.act), pack, kDenseMaxInputs);
  if (in.w.shape.size() != 2 || in.w.dim(1) != in.x.dim(1) || in.w.dim(0) < 1 ||
      in.w.dim(0) > (int64_t{1} << 24))
    throw_bad_input("dense input 'w': expected [n_out in [1, 2^24], {}]", in.x.dim(1));
  if (!in.bias.data.empty() && in.bias.shape != Shape{in.w.dim(0)})
    throw_bad_input("dense input 'bias': expected [{}] or empty", in.w.dim(0));
  for (size_t i = 0; i < in.x.data.size(); ++i)
    if (!std::isfinite(in.x.data[i]))
      throw_bad_input("dense input 'x'[{}, {}] is not finite ({})", i / in.x.dim(1),
                      i % in.x.dim(1), in.x.data[i]);
  return TANDEM_DISPATCH(opt, run_dense_rows, in, opt);
}

AttentionOutputs run_attention_causal(const AttentionInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  const int64_t T = in.q.shape.size() == 2 ? in.q.dim(0) : 0, d = T ? in.q.dim(1) : 0;
  if (T < 1 || d < 1 || in.heads < 1 || d % in.heads)
    throw_bad_input("attention input 'q': expected [T >= 1, d] with d a multiple of heads = {}",
                    in.heads);
  if (in.keys.shape.size() != 2 || in.keys.dim(1) != d || in.keys.dim(0) < T ||
      in.values.shape != in.keys.shape)
    throw_bad_input("attention inputs 'keys', 'values': expected [P + {}, {}] each", T, d);
  if (in.keys.dim(0) + d / in.heads > kAttentionMaxPositions)
    throw_bad_input("attention input 'keys': {} positions, at most {} (scores in shared memory)",
                    in.keys.dim(0), kAttentionMaxPositions - d / in.heads);
  for (const auto& [name, t] :
       {std::pair{"q", &in.q}, std::pair{"keys", &in.keys}, std::pair{"values", &in.values}})
    for (int64_t i = 0; i < t->size(); ++i)
      if (!std::isfinite(t->data[i]))
        throw_bad_input("attention input '{}'[{}, {}] is not finite ({})", name, i / d, i % d,
                        t->data[i]);
  return TANDEM_DISPATCH(opt, run_attention_causal, in, opt);
}

}  // namespace tandem
