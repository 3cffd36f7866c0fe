#include "sim/dspark_traffic.hpp"

#include <algorithm>

#include "core/dspark_config.hpp"
#include "core/philox.hpp"
#include "problem/model.hpp"
#include "sim/dense_traffic.hpp"
#include "sim/kvcache_traffic.hpp"
#include "sim/model_traffic.hpp"  // the attention's LoRAs, the unembedding
#include "sim/moe_traffic.hpp"
#include "sim/residual_traffic.hpp"
#include "sim/sparse_attn_traffic.hpp"
#include "sim/vision_traffic.hpp"

namespace tandem::sim {
namespace {

constexpr uint64_t kWord = 4;  // int32 tokens, uint32 positions and float probabilities

// The weights a warp inverse CDF over w(0..V) with uniform u reads, replaying the kernel's float
// sums: every lane sums its block of 32 contiguous ones once (blocks combined in order); the
// owner of the first block passing u x total rescans it up to the token passing it; when
// rounding leaves the target past every block, or the rescan ends without passing it, every
// lane scans its block again for the last non-zero weight.
template <class Weight>
uint64_t inverse_cdf_reads(int64_t V, float u, Weight w) {
  const int64_t block = (V + 31) / 32;
  float sums[32] = {}, total = 0;
  for (int b = 0; b < 32; ++b) {
    for (int64_t v = b * block; v < std::min(V, (b + 1) * block); ++v) sums[b] += w(v);
    total += sums[b];
  }
  const float target = u * total;
  float before = 0;
  for (int b = 0; b < 32; ++b) {
    if (before + sums[b] > target) {
      float cum = before;
      for (int64_t v = b * block; v < std::min(V, (b + 1) * block); ++v)
        if ((cum += w(v)) > target) return uint64_t(V + v - b * block + 1);
      return uint64_t(V + std::min(V, (b + 1) * block) - b * block + V);
    }
    before += sums[b];
  }
  return uint64_t(2 * V);
}

// Whether the residual max(0, p_t - p_d) of one row has mass <= kResidualMassFloor, summed as the
// kernel sums it (32 contiguous blocks, blocks in order): the draw then rescans p_t alone.
bool residual_is_empty(const float* p_t, const float* p_d, int64_t V) {
  const int64_t block = (V + 31) / 32;
  float total = 0;
  for (int64_t begin = 0; begin < V; begin += block) {
    float part = 0;
    for (int64_t v = begin; v < std::min(V, begin + block); ++v)
      part += std::max(0.0f, p_t[v] - p_d[v]);
    total += part;
  }
  return total <= kResidualMassFloor;
}

// The bytes of verification's draw at row k of request r (uniform u): over the residual (both
// rows read), or, when it is empty or there is no p_d (the bonus), over p_t alone (after one
// pass summing the empty residual).
uint64_t draw_bytes(const VerifyInputs& in, int64_t r, int64_t k, float u, bool residual) {
  const int64_t K = in.budget, V = in.vocab;
  const float* p_t = in.p_target.ptr() + (r * (K + 1) + k) * V;
  const float* p_d = in.p_draft.ptr() + (r * K + std::min(k, K - 1)) * V;
  auto target = [&](int64_t v) { return p_t[v]; };
  if (!residual) return inverse_cdf_reads(V, u, target) * kWord;
  if (residual_is_empty(p_t, p_d, V))
    return uint64_t(V) * 2 * kWord + inverse_cdf_reads(V, u, target) * kWord;
  return inverse_cdf_reads(V, u, [&](int64_t v) { return std::max(0.0f, p_t[v] - p_d[v]); }) * 2 *
         kWord;
}

}  // namespace

LaunchLog predict_dspark_verify(const VerifyInputs& in, const VerifyOutputs& decisions) {
  constexpr int A = int(Traffic::activation), C = int(Traffic::coefficient);
  const int64_t K = in.budget, V = in.vocab;
  LaunchCounts c{"dspark_verify"};
  for (int64_t r = 0; r < in.requests; ++r) {
    const int64_t a = decisions.accepted[r];
    const int64_t k_r = in.drafted.empty() ? K : in.drafted[r];
    const bool rejected = a < k_r;
    // The position, the optional count and id; each decided draft token; the accepted ones
    // again when they are emitted.
    const uint64_t request_words = 1 + !in.drafted.empty() + !in.request.empty();
    c.read[C] += kWord * (request_words + uint64_t(a + (rejected ? 1 : 0) + a));
    if (in.greedy) {
      c.read[A] += uint64_t(a + 1) * V * kWord;  // one argmax over p_t per decided row
    } else {
      c.read[A] += uint64_t(a + (rejected ? 1 : 0)) * 2 * kWord;  // p_d(x), p_t(x)
      const uint32_t id = in.request.empty() ? uint32_t(r) : in.request[r];
      const float u =
          philox_uniform(philox_draw(in.seed, id, in.position[r] + uint32_t(a), 1).v[0]);
      c.read[A] += draw_bytes(in, r, a, u, rejected);
    }
    c.written[A] += kWord * uint64_t(1 + K + 1);  // accepted, emitted row
  }
  return {c};
}

LaunchCounts predict_markov_draft(const MarkovDraftInputs& in, const Tensor<float>& p) {
  constexpr int A = int(Traffic::activation), C = int(Traffic::coefficient),
                W = int(Traffic::weight);
  const int64_t K = in.budget, V = in.base.dim(2), d = in.streams.dim(3);
  const uint64_t r = uint64_t(in.markov_in.dim(1)), row = uint64_t(V) * kWord;
  LaunchCounts c{"dspark_markov_draft"};
  for (int64_t q = 0; q < in.requests; ++q) {
    c.read[C] += 3 * kWord;  // last, request, position
    for (int64_t k = 0; k < K; ++k) {
      // W1[x_{k-1}] and W2 in full; the confidence's weights; the pre.
      c.read[W] += (r + r * uint64_t(V) + uint64_t(d) + r) * kWord;
      c.read[C] += 4 * kWord;
      // The base row and the streams; the logits twice more (softmax's sum, then p); the choice:
      // an argmax over the logits, or the inverse CDF over p.
      c.read[A] += row + uint64_t(4 * d) * kWord + 2 * row;
      if (in.greedy) {
        c.read[A] += row;
      } else {
        const float* pk = p.ptr() + (q * K + k) * V;
        const float u = philox_uniform(
            philox_draw(in.seed, in.request[q], in.position[q] + uint32_t(k), 2).v[0]);
        c.read[A] += inverse_cdf_reads(V, u, [&](int64_t v) { return pk[v]; }) * kWord;
      }
      c.written[A] += 2 * row + 2 * kWord;  // logits, p, the confidence, the token
    }
  }
  return c;
}

LaunchLog predict_drafter(const DsparkConfig& c, int64_t feature_dim, int64_t T, int K,
                          const DraftChoice& choice, const Tensor<float>& p) {
  constexpr ActDType f32 = ActDType::f32;
  const int64_t W = std::min<int64_t>(T, c.window), g = c.gamma, d = c.width, n = W + g;
  const int64_t H = c.heads, E = c.experts, k = c.top_k, V = c.vocab;
  LaunchLog log;
  auto add = [&](const LaunchLog& l) { log.insert(log.end(), l.begin(), l.end()); };
  if (W > 0) {  // the injected rows: main_proj, main_norm
    log.push_back(predict_dense_rows(W, feature_dim, d, f32));
    log.push_back(predict_rms_norm_rows(W, d, f32));
  }
  SparseAttnInputs attn;  // every record from every block position; no compressed entries
  attn.heads = c.heads;
  attn.q.shape = {g, H, kKvMainDims};
  attn.window = model_store_options(KvFormat::v41_window, n, 0);
  attn.comp = model_store_options(KvFormat::v41_fp4, 0, 0);
  attn.window_idx = Tensor<int32_t>({g, n}, 0);
  attn.comp_idx = Tensor<int32_t>({g, 0});
  for (int b = 0; b < c.blocks; ++b) {
    log.push_back(predict_residual_boundary(g, d, f32, b > 0, b > 0, true, true));
    add(predict_kv_window_store(KvFormat::v41_window, n, d));
    add(predict_query_latent(g, d, c.lora));
    add(predict_head_queries(g, H, c.lora));
    log.push_back(predict_sparse_attn(attn));
    add(predict_output_lora(g, H, d, c.lora));
    log.push_back(predict_residual_boundary(g, d, f32, true, true, true, true));
    log.push_back(predict_dense_rows(g, d, E, f32));
    log.push_back(predict_moe_gate(g, E, k, 0));
    add(predict_moe_experts(g, d, c.expert_hidden, k + 1, f32));  // + the shared expert
  }
  log.push_back(predict_residual_boundary(g, d, f32, true, true, true, false));  // the head
  add(predict_unembed(g, d, V));
  if (K > 0) {
    MarkovDraftInputs in;
    in.requests = 1, in.budget = K;
    in.base.shape = {1, g, V}, in.streams.shape = {1, g, 4, d};
    in.markov_in.shape = {V, c.markov_rank};
    in.request = {choice.request}, in.position = {choice.position};
    in.seed = choice.seed, in.greedy = choice.greedy;
    log.push_back(predict_markov_draft(in, p));
  }
  return log;
}

}  // namespace tandem::sim
