#include "optimized/drafter.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "optimized/block_runner.hpp"
#include "optimized/dspark.hpp"
#include "optimized/kvcache.hpp"
#include "optimized/moe.hpp"
#include "optimized/residual.hpp"
#include "optimized/sparse_attn.hpp"
#include "optimized/vision.hpp"
#include "problem/dense.hpp"

namespace tandem {
namespace {

static_assert(
    kDsparkMaxHeads * kKvMainDims <= kDenseMaxInputs &&
        3 * kDsparkMaxBackboneWidth <= kDenseMaxInputs && (3 * kDsparkBackboneWidthStep) % 4 == 0,
    "wo's and main_proj's input rows are rows dense_rows stages (core/dspark_config.hpp)");

class DrafterRunner : BlockRunner {
 public:
  DrafterRunner(const DsparkConfig& c, const DrafterWeights& w, const RunOptions& opt)
      : BlockRunner(dspark_mhc_config(c), opt), c_(c), w_(w) {
    for (const DrafterWeights::Stage& st : w.stages) experts_.emplace_back(st.w_in, st.w_out);
  }

  ModelRun run(const Tensor<float>& features, int32_t last, int64_t first, int K,
               const DraftChoice& choice) {
    inject(features, first);
    const int64_t g = c_.gamma, d = c_.width;
    Tensor<float> x({g, 4, d});  // the block [last, noise x (gamma - 1)] on 4 equal streams
    for (int64_t i = 0; i < g; ++i) {
      const Tensor<float> row = w_.embed.row_block(i == 0 ? last : c_.noise_id, 1);
      for (int s = 0; s < 4; ++s) std::copy_n(row.ptr(), d, x.ptr() + (i * 4 + s) * d);
    }
    start_chunk(std::move(x));
    for (int b = 0; b < c_.blocks; ++b) {
      const std::string stage = fmt::format("stage{}", b);
      boundary(w_.stages[size_t(b)].attn_site, stage + ".attn");
      attention(b);
      boundary(w_.stages[size_t(b)].ffn_site, stage + ".moe");
      moe(b);
    }
    const Tensor<float> last_coef = coef_;  // its pre collapses the head (no hc_head)
    ResidualSiteWeights head;
    head.norm_w = w_.head_norm;
    boundary(head, "head");
    const Tensor<float> logits = unembed(w_.unembed);
    tap("logits", logits);
    if (K > 0) draft(logits, last_coef, last, K, choice);
    return std::move(out_);
  }

 private:
  // The newest `window` feature rows through main_proj and main_norm: the rows each stage's
  // wkv writes into its window ("KV injection") at positions start_..
  void inject(const Tensor<float>& features, int64_t first) {
    const int64_t T = features.dim(0), F = features.dim(1);
    const int64_t W = std::min<int64_t>(T, c_.window);
    start_ = first + T - W;
    context_ = Tensor<float>({0, c_.width});
    if (W == 0) return;
    const Tensor<float> newest(
        {W, F}, std::vector<float>(features.data.end() - W * F, features.data.end()));
    RmsNormOutputs n = run_rms_norm_rows(
        {ActDType::f32, dense(newest, w_.main_proj), w_.main_norm, c_.norm_eps}, opt_);
    log(n.launches);
    context_ = std::move(n.y);
    tap("context", context_);
  }

  // Stage b's window attention: the window's records (injected rows, then the block's own) into a
  // ring of W + gamma slots (position p in slot p mod slots), read by every block position.
  void attention(int b) {
    const ModelWeights::Attention& a = w_.stages[size_t(b)].attn;
    const int64_t W = context_.dim(0), g = c_.gamma, n = W + g, d = c_.width, H = c_.heads;
    KvWindowInputs win;
    win.store = options(KvFormat::v41_window, n);
    win.window = int(n), win.start = start_;
    win.x = Tensor<float>({n, d});  // [context ; block]
    std::copy(context_.data.begin(), context_.data.end(), win.x.data.begin());
    std::copy(y_.data.begin(), y_.data.end(), win.x.data.begin() + W * d);
    win.wkv = a.window_wkv, win.norm_w = a.window_norm;
    KvStoreOutputs records = run_kv_window_store(win, opt_);
    log(records.launches);
    std::vector<int64_t> slots;
    for (int64_t r = 0; r < n; ++r) slots.push_back((start_ + r) % n);
    tap_records(pending_ + ".window", records.stored, records.pool, KvFormat::v41_window, slots);
    SparseAttnInputs in;
    in.heads = c_.heads, in.start = start_ + W;
    in.q = queries(a, query_latent(a), H, in.start);
    in.sinks = a.sinks;
    in.window = win.store, in.window_pool = std::move(records.pool);
    in.window_idx = Tensor<int32_t>({g, n});  // every slot, oldest first, from every position
    for (int64_t i = 0; i < g * n; ++i)
      in.window_idx.data[size_t(i)] = int32_t(slots[size_t(i % n)]);
    in.comp = options(KvFormat::v41_fp4, 0);  // window-only: an empty pool (never read)
    in.comp_pool = Tensor<uint8_t>({kv_pool_bytes(in.comp)}, kKvPoison);
    in.page_table = model_page_table(0);
    in.comp_idx = Tensor<int32_t>({g, 0});
    attend(in, a, c_.lora.o_groups);
  }

  // Stage b's MoE: the routed experts at their gate weights, then the shared expert (the last
  // of w_in / w_out) at weight 1, in one launch of the experts kernel.
  void moe(int b) {
    const DrafterWeights::Stage& st = w_.stages[size_t(b)];
    const int64_t g = c_.gamma;
    MoeGateInputs gate;
    gate.logits = dense(y_, st.router);
    gate.is_image.assign(size_t(g), 0);
    gate.bias_text = gate.bias_vl = st.bias;
    gate.top_k = c_.top_k;
    const MoeGateOutputs routed = run_moe_gate(gate, opt_);
    log(routed.launches);
    tap(pending_ + ".experts", tensor_cast<float>(routed.experts));
    MoeExpertInputs in{ActDType::f32, y_, routed.experts, routed.weights, {}, {}};
    append_shared_expert(in.experts, in.weights, c_.experts);
    experts_[size_t(b)].bind(in);
    const MoeExpertOutputs o = run_moe_experts(in, opt_);
    log(o.launches);
    f_ = o.f;
    tap(pending_ + ".f", f_);
  }

  // The Markov step over the pass's logits and closed streams: one request.
  void draft(const Tensor<float>& logits, const Tensor<float>& coef, int32_t last, int K,
             const DraftChoice& choice) {
    const int64_t g = c_.gamma, V = c_.vocab;
    MarkovDraftInputs in;
    in.requests = 1, in.budget = K;
    in.base = Tensor<float>({1, g, V}, logits.data);
    in.streams = Tensor<float>({1, g, 4, c_.width}, x_.data);
    in.coef = Tensor<float>({1, g, 24}, coef.data);
    in.markov_in = w_.markov_in, in.markov_out = w_.markov_out, in.confidence = w_.confidence;
    in.last = {last}, in.request = {choice.request}, in.position = {choice.position};
    in.seed = choice.seed, in.greedy = choice.greedy, in.temperature = float(choice.temperature);
    MarkovDraftOutputs o = run_markov_draft(in, opt_);
    log(o.launches);
    o.logits.shape = {K, V}, o.p.shape = {K, V}, o.confidence.shape = {K};
    tap("draft.logits", o.logits);
    tap("draft.p", o.p);
    tap("draft.confidence", o.confidence);
    tap("draft.tokens", Tensor<float>({K}, {o.tokens.data.begin(), o.tokens.data.end()}));
  }

  const DsparkConfig c_;
  const DrafterWeights& w_;
  std::vector<SeededExperts> experts_;  // per stage
  int64_t start_ = 0;                   // the window's first position
  Tensor<float> context_;               // [W, width] the injected rows
};

}  // namespace

ModelRun run_drafter(const DsparkConfig& c, const DrafterWeights& w, const Tensor<float>& features,
                     int32_t last, int64_t first, int K, const DraftChoice& choice,
                     const RunOptions& opt) {
  const int64_t feature_dim = w.main_proj.shape.size() == 2 ? w.main_proj.dim(1) : 0;
  validate_drafter_weights(c, feature_dim, w);
  validate_drafter_inputs(c, feature_dim, features, last, first);
  if (K < 0 || K > c.gamma)
    throw_bad_input("dspark drafter: {} drafted tokens, at most gamma = {}", K, c.gamma);
  const float t = float(choice.temperature);  // the Markov kernel's
  if (!choice.greedy && !(t > 0 && std::isfinite(t)))
    throw_bad_input("dspark drafter: temperature {} must be finite and > 0 in float",
                    choice.temperature);
  validate_block_threads(opt, 256, "the residual kernels use ~200 registers per thread");
  DrafterRunner runner(c, w, opt);
  // From here every launch's input is an earlier launch's output.
  try {
    return runner.run(features, last, first, K, choice);
  } catch (const BadInput& e) {
    throw KernelFault("drafter", fmt::format("optimized drafter: a kernel output was refused by "
                                             "the next launch: {}",
                                             e.what()));
  }
}

}  // namespace tandem
