#include "reference/drafter.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/error.hpp"
#include "core/philox.hpp"
#include "problem/kvcache.hpp"
#include "problem/sparse_attn.hpp"
#include "reference/dspark.hpp"
#include "reference/kvcache.hpp"
#include "reference/model_util.hpp"
#include "reference/sparse_attn.hpp"
#include "reference/vision.hpp"

namespace tandem::reference {
namespace {

// The first maximum of a row (the lower index wins ties, as greedy verification).
int32_t first_argmax(const Eigen::RowVectorXd& row) {
  Eigen::Index best;
  row.maxCoeff(&best);
  return static_cast<int32_t>(best);
}

static_assert(kDsparkWidthStep == 8 && kDsparkMaxWidth == kKvMaxHidden,
              "the drafter's widths are the window store's (core/dspark_config.hpp)");
static_assert(kDsparkHeadStep == kSparseAttnHeadGroup && kDsparkMaxHeads <= kSparseAttnMaxHeads,
              "the drafter's heads are sparse attention's (core/dspark_config.hpp)");

// A fitted value as the kernels hold it: float, row-major [rows, cols] ([rows] for a column).
Tensor<float> floats(const Eigen::MatrixXd& m) {
  Tensor<float> t(m.cols() == 1 ? Shape{m.rows()} : Shape{m.rows(), m.cols()});
  for (int64_t r = 0; r < m.rows(); ++r)
    for (int64_t c = 0; c < m.cols(); ++c) t.data[size_t(r * m.cols() + c)] = float(m(r, c));
  return t;
}
template <class S>
Vec<S> vec_of(const Tensor<float>& t) {
  return Eigen::Map<const Eigen::VectorXf>(t.ptr(), t.size()).cast<S>();
}
template <class S>
Site<S> site_of(const ResidualSiteWeights& w) {
  return {as_matrix<S>(w.fn), vec_of<S>(w.base), vec_of<S>(w.scale), vec_of<S>(w.norm_w), {}};
}

}  // namespace

DsparkDrafter::DsparkDrafter(const DsparkConfig& c, int64_t feature_dim, uint64_t seed)
    : c_(c), feature_dim_(feature_dim) {
  if (c.noise_id < 0 || c.noise_id >= c.vocab || !dspark_stage_shape_ok(c))
    throw_bad_input(
        "dspark drafter: noise_id {} must be in [0, {}), width {} a multiple of {} in [{}, {}], "
        "heads {} a multiple of {} in [{}, {}], experts {} in [1, {}] with top_k {} in [1, {}], "
        "expert_hidden {} a multiple of {} in [{}, {}]",
        c.noise_id, c.vocab, c.width, kDsparkWidthStep, kDsparkWidthStep, kDsparkMaxWidth, c.heads,
        kDsparkHeadStep, kDsparkHeadStep, kDsparkMaxHeads, c.experts, kMoeMaxExperts, c.top_k,
        kMoeMaxTopK, c.expert_hidden, kMoeHiddenStep, kMoeHiddenStep, kMoeMaxHidden);
  // Uniform in [lo, hi) (Philox stream `id`), float values, as the model's weights are drawn.
  auto uniform = [&](Shape shape, uint32_t id, double lo, double hi) {
    return seeded_floats(std::move(shape), seed, id, lo, hi);
  };
  // The same values, generated where read.
  auto seeded = [&](int64_t rows, int64_t cols, uint32_t id, double lo, double hi) {
    return SeededMatrix{seed, id, rows, cols, lo, hi};
  };
  const int64_t d = c.width, D = kKvMainDims, F = c.expert_hidden;
  const int64_t V = c.vocab, r = c.markov_rank, E = c.experts;
  mhc_ = dspark_mhc_config(c);
  const double a = 1 / std::sqrt(double(feature_dim));
  w_.main_proj = uniform({d, feature_dim}, 1, -a, a);
  w_.embed = seeded(V, d, 2, -1, 1);
  w_.unembed = dspark_holds_unembed(c) ? Projection(uniform({V, d}, 4, -1, 1))
                                       : Projection(seeded(V, d, 4, -1, 1));
  w_.markov_in = uniform({V, r}, 5, -1, 1);
  w_.markov_out = uniform({r, V}, 6, -1 / std::sqrt(double(r)), 1 / std::sqrt(double(r)));
  w_.confidence = uniform({d + r}, 7, -1, 1);
  w_.main_norm = uniform({d}, 8, 0.75, 1.25);
  w_.head_norm = uniform({d}, 9, 0.75, 1.25);
  const double s = 1 / std::sqrt(double(d)), fn = 2 / std::sqrt(4.0 * d);
  const double sf = 1 / std::sqrt(double(F));
  for (int b = 0; b < c.blocks; ++b) {
    const uint32_t id = uint32_t(b + 1) << 16;  // room for 1024 experts' streams
    auto site = [&](uint32_t i) {
      return ResidualSiteWeights{uniform({24, 4 * d}, i, -fn, fn),
                                 uniform({24}, i + 1, -1, 1),
                                 uniform({3}, i + 2, 0.5, 1.5),
                                 uniform({d}, i + 3, 0.75, 1.25),
                                 {}};
    };
    DrafterWeights::Stage st;
    st.attn_site = site(id);
    st.ffn_site = site(id + 4);
    uint32_t lora_id = id + 15;  // after the stage's other weights, before its experts'
    st.attn =
        lora_weights(c.heads, d, c.lora, [&](int64_t rows, int64_t cols, double lo, double hi) {
          return Projection(seeded(rows, cols, lora_id++, lo, hi));
        });
    st.attn.window_wkv = uniform({D, d}, id + 9, -s, s);
    st.attn.window_norm = uniform({D}, id + 10, 0.75, 1.25);
    st.attn.sinks = uniform({c.heads}, id + 11, -1, 1);
    const double rr = 2 * std::sqrt(3.0) * s;  // the router's logits spread about +-2
    st.router = uniform({E, d}, id + 13, -rr, rr);
    st.bias = uniform({E}, id + 14, -0.5, 0.5).data;
    for (int64_t e = 0; e <= E; ++e) {  // the routed experts, then the shared one
      st.w_in.push_back(seeded(2 * F, d, id + 100 + 2 * uint32_t(e), -s, s));
      st.w_out.push_back(seeded(d, F, id + 101 + 2 * uint32_t(e), -sf, sf));
    }
    w_.stages.push_back(std::move(st));
  }
  p_ = params_of<double>(w_);
}

template <class S>
DsparkDrafter::Params<S> DsparkDrafter::params_of(const DrafterWeights& w) const {
  Params<S> p;
  p.main_proj = as_matrix<S>(w.main_proj);
  p.markov_in = as_matrix<S>(w.markov_in);
  p.markov_out = as_matrix<S>(w.markov_out);
  p.main_norm = vec_of<S>(w.main_norm);
  p.head_norm = vec_of<S>(w.head_norm);
  p.confidence = vec_of<S>(w.confidence);
  for (const DrafterWeights::Stage& st : w.stages)
    p.stages.push_back(
        {site_of<S>(st.attn_site), site_of<S>(st.ffn_site),
         dspark_holds_loras(c_) ? std::optional(lora_mats<S>(st.attn)) : std::nullopt,
         as_matrix<S>(st.router), ExpertTable<S>(st.w_in, st.w_out)});
  return p;
}

template <class S>
std::vector<Vec<S>> DsparkDrafter::attention(const Params<S>& p, int b,
                                             const std::vector<Vec<S>>& context,
                                             const std::vector<Vec<S>>& y, int64_t start,
                                             const TapSink& tap, const ForcedTaps* forced) const {
  const ModelWeights::Attention& w = w_.stages[size_t(b)].attn;
  const std::string name = fmt::format("stage{}.attn", b);
  const int64_t W = int64_t(context.size()), g = int64_t(y.size()), n = W + g, d = c_.width;
  const int64_t H = c_.heads;
  // The window's KV: the injected context rows, then the block's own, through the stage's wkv
  // (the store kernel reads its rows as bf16, as in the model).
  KvWindowInputs win;
  win.store = model_store_options(KvFormat::v41_window, n, c_.norm_eps);
  win.window = int(n), win.start = start;
  win.x = Tensor<float>({n, d});
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < d; ++i)
      win.x.data[size_t(r * d + i)] = float(store<bf16>(r < W ? context[r](i) : y[r - W](i)));
  win.wkv = w.window_wkv, win.norm_w = w.window_norm;
  const KvRun<S> stored = kv_window_store<S, ActOf<S>>(win);
  const Tensor<uint8_t> records =
      tap_records(name + ".window", stored.stored, KvFormat::v41_window, tap, forced);
  SparseAttnInputs in;
  in.heads = c_.heads, in.start = start + W;
  in.window = win.store;
  in.window_pool = Tensor<uint8_t>({kv_pool_bytes(in.window)}, kKvPoison);
  const KvPageLayout at{kv_format_info(in.window.format), in.window.page_size};
  for (int64_t r = 0; r < n; ++r)
    copy_record_in(at, records.ptr() + r * records.dim(1), stored.slots[size_t(r)],
                   in.window_pool.ptr());
  in.window_idx = Tensor<int32_t>({g, n});  // every ring slot, oldest first, from every position
  for (int64_t i = 0; i < g * n; ++i) in.window_idx.data[size_t(i)] = int32_t((start + i % n) % n);
  // The queries are stored bf16 before and after their RoPE (the kernels' input dtype), as the
  // model's truth rounds them (reference/model_cache.cpp).
  const std::optional<LoraMats<S>>& held = p.stages[size_t(b)].lora;
  const LoraMats<S> generated = held ? LoraMats<S>{} : lora_mats<S>(w);
  const LoraMats<S>& lora = held ? *held : generated;
  Tensor<S> q = head_queries<S>(lora, query_latent<S>(lora, y, c_.norm_eps, name, tap), H,
                                c_.norm_eps, name, tap, forced);
  q = rope_queries<S, bf16>(std::move(q), in.start, in.rope_theta);
  tap_and_snap(name + ".q", q, tap, forced);
  in.q = tensor_cast<float>(q);
  in.sinks = w.sinks;
  in.comp = model_store_options(KvFormat::v41_fp4, 0, c_.norm_eps);  // window-only: nothing read
  in.comp_pool = Tensor<uint8_t>({kv_pool_bytes(in.comp)}, kKvPoison);
  in.page_table = model_page_table(0);
  in.comp_idx = Tensor<int32_t>({g, 0});
  SparseAttnRun<S> run = sparse_attn<S, ActOf<S>>(in);
  tap_and_snap(name + ".o", run.o, tap, forced);
  return attention_output<S>(lora, run.o, c_.lora.o_groups, name, tap);
}

template <class S>
std::vector<Vec<S>> DsparkDrafter::moe(const Params<S>& p, int b, const std::vector<Vec<S>>& y,
                                       const TapSink& tap) const {
  const int64_t g = int64_t(y.size()), E = c_.experts, k = c_.top_k;
  const typename Params<S>::Stage& st = p.stages[size_t(b)];
  MoeGateInputs gate;
  gate.logits = Tensor<float>({g, E});  // the router's logits in the gate kernel's dtype
  for (int64_t i = 0; i < g; ++i)
    for (int64_t e = 0; e < E; ++e)
      gate.logits.data[size_t(i * E + e)] = float(naive_dot<S>(st.router.row(e), y[i]));
  gate.is_image.assign(size_t(g), 0);
  gate.bias_text = gate.bias_vl = w_.stages[size_t(b)].bias;
  gate.top_k = c_.top_k;
  const MoeGateRef routed = moe_gate<S>(gate);
  tap(fmt::format("stage{}.moe.experts", b), tensor_cast<double>(routed.experts));
  // The routed experts at their gate weights, then the shared expert at weight 1.
  std::vector<int32_t> experts;
  std::vector<double> weights;
  for (int64_t i = 0; i < g; ++i) {
    experts.insert(experts.end(), routed.experts.ptr() + i * k, routed.experts.ptr() + (i + 1) * k);
    weights.insert(weights.end(), routed.weights.ptr() + i * k, routed.weights.ptr() + (i + 1) * k);
    experts.push_back(int32_t(E)), weights.push_back(1.0);
  }
  return st.experts.mix(y, experts, weights, k + 1);
}

template <class S>
DsparkDrafter::PassOutputs DsparkDrafter::pass(const Params<S>& p, const Eigen::MatrixXd& features,
                                               int32_t last, int64_t first, const TapSink& tap,
                                               const ForcedTaps* forced) const {
  const int64_t W = std::min<int64_t>(features.rows(), c_.window), g = c_.gamma, d = c_.width;
  if (features.cols() != feature_dim_ || last < 0 || last >= c_.vocab)
    throw_bad_input("dspark drafter: features must be [T, {}] and the last token in [0, {})",
                    feature_dim_, c_.vocab);
  // Only the newest `window` positions are read: older features cannot change the draft.
  // main_proj, main_norm: [W] rows of [width], each stage injects them through its own wkv.
  const int64_t start = first + features.rows() - W;  // the window's first position
  const S eps = S(c_.norm_eps);
  std::vector<Vec<S>> context;
  for (int64_t j = features.rows() - W; j < features.rows(); ++j) {
    const Vec<S> f = features.row(j).transpose().cast<float>().cast<S>();  // read as float
    context.push_back(rms_norm<S>(naive_matvec<S>(p.main_proj, f), p.main_norm, eps));
  }
  if (W > 0) tap("context", rows_tensor(context));
  // The block [last, noise x (gamma - 1)] on 4 equal streams.
  std::vector<Mat<S>> x;
  for (int64_t i = 0; i < g; ++i)
    x.push_back(seeded_rows<S>(w_.embed, i == 0 ? last : c_.noise_id, 1).replicate(4, 1));
  std::vector<Vec4<S>> pre(size_t(g), Vec4<S>(1, 0, 0, 0));
  PassOutputs out;
  auto matrix = [&](const std::vector<Vec<S>>& rows) {
    Eigen::MatrixXd m(int64_t(rows.size()), d);
    for (size_t i = 0; i < rows.size(); ++i)
      m.row(int64_t(i)) = rows[i].transpose().template cast<double>();
    return m;
  };
  for (int b = 0; b < c_.blocks; ++b) {
    const std::string stage = fmt::format("stage{}", b);
    out.stage_y.push_back(matrix(mhc_site(x, pre, p.stages[size_t(b)].attn_site, mhc_,
                                          stage + ".attn", tap, [&](const std::vector<Vec<S>>& y) {
                                            return attention(p, b, context, y, start, tap, forced);
                                          })));
    mhc_site(x, pre, p.stages[size_t(b)].ffn_site, mhc_, stage + ".moe", tap,
             [&](const std::vector<Vec<S>>& y) { return moe(p, b, y, tap); });
  }
  std::vector<Vec<S>> u, h;
  for (int64_t i = 0; i < g; ++i) {
    u.push_back(collapse(x[i], pre[i]));  // with the last site's pre (no hc_head)
    h.push_back(rms_norm<S>(u.back(), p.head_norm, eps));
  }
  tap("head.y", rows_tensor(h));
  out.logits = unembed_logits<S>(w_.unembed, h);
  Tensor<double> logits({g, c_.vocab});
  Eigen::Map<Eigen::Matrix<double, -1, -1, Eigen::RowMajor>>(logits.ptr(), g, c_.vocab) =
      out.logits;
  tap("logits", std::move(logits));
  out.collapsed = matrix(u);
  out.hidden = matrix(h);
  return out;
}

DsparkDrafter::PassOutputs DsparkDrafter::forward(const Eigen::MatrixXd& features, int32_t last,
                                                  int64_t first) const {
  return pass(
      p_, features, last, first, [](std::string, Tensor<double>) {}, nullptr);
}

template <class S>
Draft DsparkDrafter::markov(const Params<S>& p, const PassOutputs& pass, int32_t last, int K,
                            const DraftChoice& choice, const Tensor<float>* follow) const {
  const int64_t V = c_.vocab, r = c_.markov_rank, d = c_.width;
  const S t = S(choice.greedy ? 1.0 : choice.temperature);
  Draft out;
  out.logits.resize(K, V);
  int32_t previous = last;
  for (int k = 0; k < K; ++k) {
    const Vec<S> w1 = p.markov_in.row(previous).transpose();  // W1[x_{k-1}]  [r]
    Vec<S> logits(V);
    for (int64_t v = 0; v < V; ++v) {
      S acc = S(pass.logits(k, v));
      for (int64_t j = 0; j < r; ++j) acc += w1(j) * p.markov_out(j, v);
      logits(v) = acc;
    }
    out.logits.row(k) = logits.transpose().template cast<double>();
    // As released: the confidence reads the collapsed hidden before the norm.
    S dot = 0;
    for (int64_t i = 0; i < d; ++i) dot += S(pass.collapsed(k, i)) * p.confidence(i);
    for (int64_t j = 0; j < r; ++j) dot += w1(j) * p.confidence(d + j);
    out.confidence.push_back(double(S(1) / (S(1) + std::exp(-dot))));
    const Vec<S> e = ((logits.array() - logits.maxCoeff()) / t).exp();
    const S sum = naive_dot<S>(e, Vec<S>::Ones(V));
    std::vector<float> prob(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) prob[size_t(v)] = float(e(v) / sum);
    out.p_draft.push_back(std::move(prob));
    const int32_t own =
        choice.greedy ? first_argmax(out.logits.row(k))
                      : inverse_cdf(out.p_draft.back(),
                                    philox_uniform(philox_draw(choice.seed, choice.request,
                                                               choice.position + uint32_t(k), 2)
                                                       .v[0]));
    out.tokens.push_back(own);
    // A followed token outside the vocabulary (a faulty kernel's) is not followed: its tap fails.
    const float theirs = follow ? follow->data[size_t(k)] : -1.0f;
    previous = theirs >= 0 && theirs < float(V) ? int32_t(theirs) : own;
  }
  return out;
}

Draft DsparkDrafter::propose(const Eigen::MatrixXd& features, int32_t last, int K,
                             const DraftChoice& choice, int64_t first) const {
  return markov(p_, forward(features, last, first), last, K, choice, nullptr);
}

template <class S>
std::vector<Tap> DsparkDrafter::draft_taps(const Eigen::MatrixXd& features, int32_t last,
                                           int64_t first, int K, const DraftChoice& choice,
                                           const ForcedTaps* forced) const {
  std::vector<Tap> taps;
  const TapSink tap = [&](std::string name, Tensor<double> v) {
    taps.push_back({std::move(name), std::move(v)});
  };
  auto run = [&](const Params<S>& p) {
    const PassOutputs pass = this->pass(p, features, last, first, tap, forced);
    if (K == 0) return;
    const Tensor<float>* follow = nullptr;
    if (forced)
      if (const auto it = forced->find("draft.tokens");
          it != forced->end() && it->second.shape == Shape{K})
        follow = &it->second;
    const Draft d = markov(p, pass, last, K, choice, follow);
    const int64_t V = c_.vocab;
    Tensor<double> logits({K, V}), prob({K, V});
    for (int64_t k = 0; k < K; ++k)
      for (int64_t v = 0; v < V; ++v)
        logits.data[size_t(k * V + v)] = d.logits(k, v),
                                   prob.data[size_t(k * V + v)] = d.p_draft[size_t(k)][size_t(v)];
    tap("draft.logits", std::move(logits));
    tap("draft.p", std::move(prob));
    tap("draft.confidence", Tensor<double>({K}, d.confidence));
    tap("draft.tokens", Tensor<double>({K}, std::vector<double>(d.tokens.begin(), d.tokens.end())));
  };
  if constexpr (std::is_same_v<S, double>)
    run(p_);
  else
    run(params_of<S>(w_));
  return taps;
}
template std::vector<Tap> DsparkDrafter::draft_taps<double>(const Eigen::MatrixXd&, int32_t,
                                                            int64_t, int, const DraftChoice&,
                                                            const ForcedTaps*) const;
template std::vector<Tap> DsparkDrafter::draft_taps<float>(const Eigen::MatrixXd&, int32_t, int64_t,
                                                           int, const DraftChoice&,
                                                           const ForcedTaps*) const;

namespace {

// Per draft position k and row: whether the logits z * theta pick the target (first maximum).
std::vector<std::vector<bool>> hits(const std::vector<Eigen::MatrixXd>& z,
                                    const std::vector<std::vector<int32_t>>& targets,
                                    const Eigen::MatrixXd& theta) {
  std::vector<std::vector<bool>> hit(z.size());
  for (size_t k = 0; k < z.size(); ++k)
    for (Eigen::Index i = 0; i < z[k].rows(); ++i)
      hit[k].push_back(first_argmax(z[k].row(i) * theta) == targets[k][size_t(i)]);
  return hit;
}

// Ridge regression: argmin ||Z theta - Y||^2 + lambda rows ||theta||^2 (normal equations, LDLT).
Eigen::MatrixXd ridge_fit(const Eigen::MatrixXd& gram, const Eigen::MatrixXd& zy, int64_t rows,
                          double ridge) {
  Eigen::MatrixXd a = gram;
  a.diagonal().array() += ridge * double(std::max<int64_t>(rows, 1));
  return a.ldlt().solve(zy);
}

}  // namespace

void DsparkDrafter::set_head(Tensor<float>& weight, Mat<double>& param,
                             const Eigen::MatrixXd& value) {
  // In the weight's own shape: a rank-1 Markov head stays [V, 1] and [1, V].
  for (Eigen::Index r = 0; r < value.rows(); ++r)
    for (Eigen::Index c = 0; c < value.cols(); ++c)
      weight.data[size_t(r * value.cols() + c)] = float(value(r, c));
  param = as_matrix<double>(weight);
}

void DsparkDrafter::fit_markov_in(const std::vector<DrafterExample>& examples) {
  // The backbone's mean centred logits after each token that occurs (the bigram part of what it
  // predicts), B [m tokens, V]; its best rank-r factorisation gives the Markov head's input side
  // W1 = U S^1/2 (rows of tokens never seen stay 0). U and S^2 come from the eigenvectors of
  // B B^T [m, m]: m is at most the training's positions, V may be the release's vocabulary.
  std::vector<int32_t> seen;
  for (const DrafterExample& e : examples) {
    seen.push_back(e.last);
    seen.insert(seen.end(), e.next.begin(), e.next.end() - 1);
  }
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  auto row_of = [&](int32_t t) {
    return std::lower_bound(seen.begin(), seen.end(), t) - seen.begin();
  };
  Eigen::MatrixXd bigram = Eigen::MatrixXd::Zero(int64_t(seen.size()), c_.vocab);
  Eigen::VectorXd count = Eigen::VectorXd::Zero(int64_t(seen.size()));
  for (const DrafterExample& e : examples) {
    int32_t previous = e.last;
    for (size_t k = 0; k < e.next.size(); ++k) {
      const Eigen::RowVectorXd y = e.teacher_logits.row(int64_t(k)).cast<double>();
      bigram.row(row_of(previous)) += (y.array() - y.mean()).matrix();
      count[row_of(previous)] += 1;
      previous = e.next[k];
    }
  }
  for (Eigen::Index i = 0; i < bigram.rows(); ++i) bigram.row(i) /= count[i];
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(bigram * bigram.transpose());
  const int64_t m = int64_t(seen.size()), r = std::min<int64_t>(c_.markov_rank, m);
  Eigen::MatrixXd w1 = Eigen::MatrixXd::Zero(c_.vocab, c_.markov_rank);
  for (int64_t j = 0; j < r; ++j) {  // eigenvalues ascend: the largest last
    Eigen::VectorXd u = eig.eigenvectors().col(m - 1 - j);
    Eigen::Index top;  // a singular vector's sign is arbitrary: its largest entry > 0
    u.cwiseAbs().maxCoeff(&top);
    if (u[top] < 0) u = -u;
    const double s = std::sqrt(std::max(eig.eigenvalues()[m - 1 - j], 0.0));
    for (int64_t i = 0; i < m; ++i) w1(seen[size_t(i)], j) = u[i] * std::sqrt(s);
  }
  set_head(w_.markov_in, p_.markov_in, w1);
}

TrainingReport DsparkDrafter::fit_heads(const std::vector<DrafterExample>& examples, double ridge) {
  const int64_t n = c_.width + c_.markov_rank, g = c_.gamma;
  check_examples(examples);
  for (const DrafterExample& e : examples)
    if (e.teacher_logits.rows() != int64_t(e.next.size()) || e.teacher_logits.cols() != c_.vocab)
      throw_bad_input("dspark training: an example needs its continuation's [tokens, {}] logits",
                      c_.vocab);
  fit_markov_in(examples);
  // Per draft position k: the rows z = [h_k ; W1[x_{k-1}]] and the backbone's tokens.
  // (and the confidence head's rows [collapsed h_k before the norm ; W1[x_{k-1}]]).
  std::vector<std::vector<Eigen::RowVectorXd>> rows(g), confidence_rows(g);
  std::vector<std::vector<int32_t>> tokens(g);
  Eigen::MatrixXd gram = Eigen::MatrixXd::Zero(n, n), zy = Eigen::MatrixXd::Zero(n, c_.vocab);
  Eigen::MatrixXd confidence_gram = Eigen::MatrixXd::Zero(n, n);
  for (const DrafterExample& e : examples) {
    const PassOutputs pass = forward(e.features, e.last, e.first);
    int32_t previous = e.last;
    for (size_t k = 0; k < e.next.size(); ++k) {
      Eigen::RowVectorXd z(n), zc(n);
      z << pass.hidden.row(int64_t(k)), p_.markov_in.row(previous);
      zc << pass.collapsed.row(int64_t(k)), p_.markov_in.row(previous);
      const Eigen::RowVectorXd t = e.teacher_logits.row(int64_t(k)).cast<double>();
      const Eigen::RowVectorXd y = t.array() - t.mean();
      gram.noalias() += z.transpose() * z;
      zy.noalias() += z.transpose() * y;
      confidence_gram.noalias() += zc.transpose() * zc;
      rows[k].push_back(z);
      confidence_rows[k].push_back(zc);
      tokens[k].push_back(e.next[k]);
      previous = e.next[k];
    }
  }
  TrainingReport report;
  report.examples = int64_t(examples.size());
  std::vector<Eigen::MatrixXd> z(g);
  int64_t total = 0;
  for (int64_t k = 0; k < g; ++k) {
    z[k].resize(int64_t(rows[k].size()), n);
    for (size_t i = 0; i < rows[k].size(); ++i) z[k].row(int64_t(i)) = rows[k][i];
    report.rows.push_back(z[k].rows());
    total += z[k].rows();
  }
  const Eigen::MatrixXd theta = ridge_fit(gram, zy, total, ridge);  // [unembed^T ; W2]
  w_.unembed = floats(theta.topRows(c_.width).transpose());
  set_head(w_.markov_out, p_.markov_out, theta.bottomRows(c_.markov_rank));
  // The confidence head: +-2 for whether the fitted head drafts the backbone's token.
  const std::vector<std::vector<bool>> hit = hits(z, tokens, theta);
  Eigen::VectorXd zy_confidence = Eigen::VectorXd::Zero(n);
  for (int64_t k = 0; k < g; ++k) {
    int64_t right = 0;
    for (size_t i = 0; i < hit[k].size(); ++i) {
      right += hit[k][i];
      zy_confidence += (hit[k][i] ? 2.0 : -2.0) * confidence_rows[k][i].transpose();
    }
    report.fit_accuracy.push_back(z[k].rows() ? double(right) / double(z[k].rows()) : 0.0);
  }
  const Eigen::MatrixXd confidence = ridge_fit(confidence_gram, zy_confidence, total, ridge);
  w_.confidence = floats(confidence);
  p_.confidence = vec_of<double>(w_.confidence);
  return report;
}

void DsparkDrafter::check_examples(const std::vector<DrafterExample>& examples) const {
  if (examples.empty()) throw_bad_input("dspark training: no examples");
  auto valid = [&](int32_t t) { return t >= 0 && t < c_.vocab; };
  for (const DrafterExample& e : examples)
    if (e.next.empty() || e.next.size() > size_t(c_.gamma) || !valid(e.last) ||
        !std::all_of(e.next.begin(), e.next.end(), valid) || e.features.cols() != feature_dim_)
      throw_bad_input(
          "dspark training: an example needs tokens in [0, {}), 1..{} continuation "
          "tokens and features of width {}",
          c_.vocab, c_.gamma, feature_dim_);
}

std::vector<double> DsparkDrafter::greedy_acceptance(
    const std::vector<DrafterExample>& examples) const {
  check_examples(examples);
  std::vector<int64_t> reached(size_t(c_.gamma), 0), accepted(size_t(c_.gamma), 0);
  DraftChoice greedy;
  greedy.greedy = true;
  for (const DrafterExample& e : examples) {
    const Draft d = propose(e.features, e.last, int(e.next.size()), greedy, e.first);
    for (size_t k = 0; k < e.next.size(); ++k) {
      ++reached[k];
      if (d.tokens[k] != e.next[k]) break;  // later drafts read this one: the pass stops here
      ++accepted[k];
    }
  }
  std::vector<double> share;
  for (int k = 0; k < c_.gamma; ++k)
    share.push_back(reached[size_t(k)] ? double(accepted[size_t(k)]) / double(reached[size_t(k)])
                                       : 0.0);
  return share;
}

std::vector<DrafterExample> greedy_examples(Backbone& model, const DsparkConfig& c, uint64_t seed,
                                            uint32_t key, const DrafterTraining& t) {
  const int gamma = c.gamma;
  const int64_t window = c.window;
  std::vector<DrafterExample> examples;
  for (int p = 0; p < t.prompts; ++p) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < t.prompt_tokens; ++i)
      prompt.push_back(int32_t(philox_draw(seed, key, uint32_t(p) * 4096 + uint32_t(i)).v[0] %
                               uint64_t(model.vocab())));
    model.rollback(0);
    const std::vector<int32_t> text = greedy_decode_float(model, prompt, t.steps);
    model.rollback(0);
    // The whole text's features and logits: a causal backbone's rows for a prefix are these.
    // [len, V]: row j chooses text[j + 1]
    const Eigen::MatrixXf logits = model.append(text).cast<float>();
    const Eigen::MatrixXd features = model.target_features();
    model.rollback(0);
    for (size_t at = prompt.size() - 1; at + 1 < text.size(); ++at) {
      DrafterExample e;
      // The cache before `last` = text[at], its newest `window` rows (all the drafter reads).
      const int64_t kept = std::min<int64_t>(int64_t(at), window);
      e.features = features.middleRows(int64_t(at) - kept, kept);
      e.first = int64_t(at) - kept;
      e.last = text[at];
      const size_t count = std::min(text.size() - at - 1, size_t(gamma));
      e.next.assign(text.begin() + int64_t(at) + 1, text.begin() + int64_t(at + 1 + count));
      e.teacher_logits = logits.middleRows(int64_t(at), int64_t(count));
      examples.push_back(std::move(e));
    }
  }
  return examples;
}

TrainedDrafter trained_drafter(const DsparkConfig& c, uint64_t seed, const DrafterTraining& t) {
  TrainedDrafter out{DsparkDrafter(c, 3 * int64_t(c.backbone_width), seed), {}};
  TinyBackbone backbone(c.vocab, c.backbone_width, seed, c.backbone_layers);
  if (!t.measure_held_out) {
    out.report =
        out.drafter.fit_heads(greedy_examples(backbone, c, seed, t.prompt_key, t), t.ridge);
    return out;
  }
  const auto held_out = greedy_examples(backbone, c, seed, t.held_out_key, t);
  const std::vector<double> before = out.drafter.greedy_acceptance(held_out);
  out.report = out.drafter.fit_heads(greedy_examples(backbone, c, seed, t.prompt_key, t), t.ridge);
  out.report.held_out_before = before;
  out.report.held_out_after = out.drafter.greedy_acceptance(held_out);
  return out;
}

}  // namespace tandem::reference
