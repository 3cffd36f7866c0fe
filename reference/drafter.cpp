#include "reference/drafter.hpp"

#include <algorithm>
#include <cmath>

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
static_assert(kDsparkHeadStep == kSparseAttnHeadGroup && kDsparkMaxHeads == kSparseAttnMaxHeads,
              "the drafter's heads are sparse attention's (core/dspark_config.hpp)");

// A weight as the kernels hold it: float, row-major [rows, cols] ([rows] for a column).
Tensor<float> floats(const Eigen::MatrixXd& m) {
  Tensor<float> t(m.cols() == 1 ? Shape{m.rows()} : Shape{m.rows(), m.cols()});
  for (int64_t r = 0; r < m.rows(); ++r)
    for (int64_t c = 0; c < m.cols(); ++c) t.data[size_t(r * m.cols() + c)] = float(m(r, c));
  return t;
}

}  // namespace

DsparkDrafter::DsparkDrafter(const DsparkConfig& c, int64_t feature_dim, uint64_t seed)
    : c_(c),
      main_proj_(
          seeded_matrix(feature_dim, c.width, seed, 1, 1.0 / std::sqrt(double(feature_dim)))),
      embed_(seeded_matrix(c.vocab, c.width, seed, 2, 1.0)),
      unembed_(seeded_matrix(c.vocab, c.width, seed, 4, 1.0)),
      markov_in_(seeded_matrix(c.vocab, c.markov_rank, seed, 5, 1.0)),
      markov_out_(seeded_matrix(c.markov_rank, c.vocab, seed, 6, 1.0 / std::sqrt(c.markov_rank))),
      confidence_(seeded_matrix(c.width + c.markov_rank, 1, seed, 7, 1.0)) {
  if (c.noise_id < 0 || c.noise_id >= c.vocab || c.top_k < 1 || c.top_k > c.experts ||
      c.expert_hidden < 1 || !dspark_stage_shape_ok(c))
    throw_bad_input(
        "dspark drafter: noise_id {} must be in [0, {}), top_k {} in [1, experts {}], "
        "expert_hidden {} at least 1, width {} a multiple of {} in [{}, {}], heads {} a "
        "multiple of {} in [{}, {}]",
        c.noise_id, c.vocab, c.top_k, c.experts, c.expert_hidden, c.width, kDsparkWidthStep,
        kDsparkWidthStep, kDsparkMaxWidth, c.heads, kDsparkHeadStep, kDsparkHeadStep,
        kDsparkMaxHeads);
  // Uniform in [lo, hi) (Philox stream `id`), as the model's weights are drawn.
  auto uniform = [&](int64_t rows, int64_t cols, uint32_t id, double lo, double hi) {
    return Eigen::MatrixXd(seeded_matrix(rows, cols, seed, id, (hi - lo) / 2).array() +
                           (hi + lo) / 2);
  };
  const int64_t d = c.width, D = kKvMainDims, HD = int64_t(c.heads) * D, F = c.expert_hidden;
  mhc_.d = c.width, mhc_.norm_eps = c.norm_eps;
  main_norm_ = uniform(d, 1, 8, 0.75, 1.25);
  head_norm_ = uniform(d, 1, 9, 0.75, 1.25);
  const double s = 1 / std::sqrt(double(d)), fn = 2 / std::sqrt(4.0 * d);
  for (int b = 0; b < c.blocks; ++b) {
    const uint32_t id = uint32_t(b + 1) << 16;  // room for 1024 experts' streams
    auto site = [&](uint32_t i) {
      return Site<double>{uniform(24, 4 * d, i, -fn, fn),
                          uniform(24, 1, i + 1, -1, 1),
                          uniform(3, 1, i + 2, 0.5, 1.5),
                          uniform(d, 1, i + 3, 0.75, 1.25),
                          {}};
    };
    Stage st;
    st.attn_site = site(id);
    st.ffn_site = site(id + 4);
    st.wq = as_matrix<double>(floats(uniform(HD, d, id + 8, -s, s)));
    st.attn.window_wkv = floats(uniform(D, d, id + 9, -s, s));
    st.attn.window_norm = floats(uniform(D, 1, id + 10, 0.75, 1.25));
    st.attn.sinks = floats(uniform(c.heads, 1, id + 11, -1, 1));
    st.wo = as_matrix<double>(
        floats(uniform(d, HD, id + 12, -1 / std::sqrt(double(HD)), 1 / std::sqrt(double(HD)))));
    const double r = 2 * std::sqrt(3.0) * s;  // the router's logits spread about +-2
    st.router = uniform(c.experts, d, id + 13, -r, r);
    const Eigen::MatrixXd bias = uniform(c.experts, 1, id + 14, -0.5, 0.5);
    st.bias.assign(bias.data(), bias.data() + bias.size());
    for (uint32_t e = 0; e <= uint32_t(c.experts); ++e)  // the routed ones, then the shared one
      st.experts.push_back(
          {uniform(F, d, id + 100 + 2 * e, -s, s),
           uniform(d, F, id + 101 + 2 * e, -1 / std::sqrt(double(F)), 1 / std::sqrt(double(F)))});
    stages_.push_back(std::move(st));
  }
}

Eigen::MatrixXd DsparkDrafter::attention(const Stage& s, const Eigen::MatrixXd& context,
                                         const Eigen::MatrixXd& y, int64_t start) const {
  const int64_t W = context.rows(), g = y.rows(), n = W + g, d = c_.width, H = c_.heads;
  // The window's KV: the injected context rows, then the block's own, through the stage's wkv
  // (the store kernel reads its rows as bf16, as in the model).
  KvWindowInputs win;
  win.store = model_store_options(KvFormat::v41_window, n, c_.norm_eps);
  win.window = int(n), win.start = start;
  win.x = Tensor<float>({n, d});
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < d; ++i)
      win.x.data[size_t(r * d + i)] = float(store<bf16>(r < W ? context(r, i) : y(r - W, i)));
  win.wkv = s.attn.window_wkv, win.norm_w = s.attn.window_norm;
  const KvRun<double> records = kv_window_store<double, double>(win);
  SparseAttnInputs in;
  in.heads = c_.heads, in.start = start + W;
  in.window = win.store;
  in.window_pool = encode_pool(in.window, tensor_cast<float>(records.stored), records.slots);
  in.window_idx = Tensor<int32_t>({g, n});  // every ring slot, oldest first, from every position
  for (int64_t i = 0; i < g * n; ++i) in.window_idx.data[size_t(i)] = int32_t((start + i % n) % n);
  // The queries, rounded to bf16 before and after their RoPE (the kernels' input dtype), as the
  // model's truth rounds them.
  Tensor<double> q({g, H, kKvMainDims});
  for (int64_t i = 0; i < g; ++i) {
    const Vec<double> row = s.wq * Vec<double>(y.row(i).transpose());
    for (int64_t j = 0; j < H * kKvMainDims; ++j)
      q.data[size_t(i * H * kKvMainDims + j)] = store<bf16>(row(j));
  }
  in.q = tensor_cast<float>(rope_queries<double, bf16>(std::move(q), in.start, in.rope_theta));
  in.sinks = s.attn.sinks;
  in.comp = model_store_options(KvFormat::v41_fp4, 0, c_.norm_eps);  // window-only: nothing read
  in.comp_pool = Tensor<uint8_t>({kv_pool_bytes(in.comp)}, kKvPoison);
  in.page_table = model_page_table(0);
  in.comp_idx = Tensor<int32_t>({g, 0});
  const SparseAttnRun<double> run = sparse_attn<double, double>(in);
  const Eigen::Map<const Eigen::Matrix<double, -1, -1, Eigen::RowMajor>> o(run.o.ptr(), g,
                                                                           H * kKvMainDims);
  return o * s.wo.transpose();
}

Eigen::MatrixXd DsparkDrafter::moe(const Stage& s, const Eigen::MatrixXd& y) const {
  const int64_t g = y.rows(), E = c_.experts;
  MoeGateInputs gate;
  gate.logits = Tensor<float>({g, E});  // the router's logits in the gate kernel's dtype
  for (int64_t i = 0; i < g; ++i)
    for (int64_t e = 0; e < E; ++e)
      gate.logits.data[i * E + e] = float(s.router.row(e).dot(y.row(i)));
  gate.is_image.assign(size_t(g), 0);
  gate.bias_text = gate.bias_vl = s.bias;
  gate.top_k = c_.top_k;
  const MoeGateRef routed = moe_gate<double>(gate);
  auto expert = [&](const Expert& e, const Eigen::VectorXd& x) -> Eigen::VectorXd {
    const Eigen::ArrayXd h = (e.w_in * x).array();
    return e.w_out * (h / (1 + (-h).exp())).matrix();  // W_out silu(W_in x)
  };
  Eigen::MatrixXd f(g, c_.width);
  for (int64_t i = 0; i < g; ++i) {
    const Eigen::VectorXd x = y.row(i).transpose();
    Eigen::VectorXd sum = expert(s.experts.back(), x);  // the shared expert
    for (int k = 0; k < c_.top_k; ++k)
      sum += routed.weights.data[i * c_.top_k + k] *
             expert(s.experts[size_t(routed.experts.data[i * c_.top_k + k])], x);
    f.row(i) = sum.transpose();
  }
  return f;
}

DsparkDrafter::PassOutputs DsparkDrafter::forward(const Eigen::MatrixXd& features, int32_t last,
                                                  int64_t first) const {
  const int64_t W = std::min<int64_t>(features.rows(), c_.window), g = c_.gamma, d = c_.width;
  // Only the newest `window` positions are read: older features cannot change the draft.
  // main_proj, main_norm: [W, width], each stage injects them through its own wkv.
  const int64_t start = first + features.rows() - W;  // the window's first position
  Eigen::MatrixXd context = features.bottomRows(W) * main_proj_;
  for (int64_t j = 0; j < W; ++j)
    context.row(j) =
        rms_norm<double>(context.row(j).transpose(), main_norm_, c_.norm_eps).transpose();
  Streams x(static_cast<size_t>(g));  // the block [last, noise x (gamma - 1)] on 4 equal streams
  for (int64_t i = 0; i < g; ++i) x[i] = embed_.row(i == 0 ? last : c_.noise_id).replicate(4, 1);
  std::vector<Vec4<double>> pre(size_t(g), Vec4<double>(1, 0, 0, 0));
  // One mHC site around a sublayer over the block: collapse with the carried pre, RMSNorm, the
  // sublayer, post and comb from the site's own input. Returns the sublayer's input [g, width].
  auto site = [&](const Site<double>& s, auto&& sublayer) {
    std::vector<Coefficients<double>> coef;
    Eigen::MatrixXd y(g, d);
    for (int64_t i = 0; i < g; ++i) {
      coef.push_back(hc_mixes(x[i], s, mhc_));
      y.row(i) = rms_norm<double>(collapse(x[i], pre[i]), s.norm_w, mhc_.norm_eps).transpose();
    }
    const Eigen::MatrixXd f = sublayer(y);
    for (int64_t i = 0; i < g; ++i) {
      x[i] = hc_post(x[i], Vec<double>(f.row(i).transpose()), coef[i]);
      pre[i] = coef[i].pre;
    }
    return y;
  };
  PassOutputs out;
  for (const Stage& s : stages_) {
    out.stage_y.push_back(site(
        s.attn_site, [&](const Eigen::MatrixXd& y) { return attention(s, context, y, start); }));
    site(s.ffn_site, [&](const Eigen::MatrixXd& y) { return moe(s, y); });
  }
  out.collapsed.resize(g, d);
  out.hidden.resize(g, d);
  for (int64_t i = 0; i < g; ++i) {
    const Vec<double> u = collapse(x[i], pre[i]);  // with the last site's pre (no hc_head)
    out.collapsed.row(i) = u.transpose();
    out.hidden.row(i) = rms_norm<double>(u, head_norm_, c_.norm_eps).transpose();
  }
  out.logits = out.hidden * unembed_.transpose();
  return out;
}

Draft DsparkDrafter::propose(const Eigen::MatrixXd& features, int32_t last, int K,
                             const DraftChoice& choice, int64_t first) const {
  const PassOutputs pass = forward(features, last, first);
  Draft d;
  d.logits.resize(K, c_.vocab);
  int32_t previous = last;
  for (int k = 0; k < K; ++k) {
    const Eigen::RowVectorXd w1 = markov_in_.row(previous);  // W1[x_{k-1}]  [r]
    d.logits.row(k) = pass.logits.row(k) + w1 * markov_out_;
    Eigen::RowVectorXd joined(c_.width + c_.markov_rank);  // as released: before the norm
    joined << pass.collapsed.row(k), w1;
    d.confidence.push_back(1.0 / (1.0 + std::exp(-joined.dot(confidence_))));
    const Eigen::RowVectorXd p = softmax(d.logits.row(k), choice.greedy ? 1.0 : choice.temperature);
    d.p_draft.emplace_back(p.data(), p.data() + p.size());
    if (choice.greedy) {
      previous = first_argmax(d.logits.row(k));
    } else {
      const float u = philox_uniform(
          philox_draw(choice.seed, choice.request, choice.position + uint32_t(k), 2).v[0]);
      previous = inverse_cdf(d.p_draft.back(), u);
    }
    d.tokens.push_back(previous);
  }
  return d;
}

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
  markov_in_.setZero();
  for (int64_t j = 0; j < r; ++j) {  // eigenvalues ascend: the largest last
    Eigen::VectorXd u = eig.eigenvectors().col(m - 1 - j);
    Eigen::Index top;  // a singular vector's sign is arbitrary: its largest entry > 0
    u.cwiseAbs().maxCoeff(&top);
    if (u[top] < 0) u = -u;
    const double s = std::sqrt(std::max(eig.eigenvalues()[m - 1 - j], 0.0));
    for (int64_t i = 0; i < m; ++i) markov_in_(seen[size_t(i)], j) = u[i] * std::sqrt(s);
  }
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
      z << pass.hidden.row(int64_t(k)), markov_in_.row(previous);
      zc << pass.collapsed.row(int64_t(k)), markov_in_.row(previous);
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
  unembed_ = theta.topRows(c_.width).transpose();
  markov_out_ = theta.bottomRows(c_.markov_rank);
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
  confidence_ = ridge_fit(confidence_gram, zy_confidence, total, ridge);
  return report;
}

void DsparkDrafter::check_examples(const std::vector<DrafterExample>& examples) const {
  if (examples.empty()) throw_bad_input("dspark training: no examples");
  auto valid = [&](int32_t t) { return t >= 0 && t < c_.vocab; };
  for (const DrafterExample& e : examples)
    if (e.next.empty() || e.next.size() > size_t(c_.gamma) || !valid(e.last) ||
        !std::all_of(e.next.begin(), e.next.end(), valid) || e.features.cols() != main_proj_.rows())
      throw_bad_input(
          "dspark training: an example needs tokens in [0, {}), 1..{} continuation "
          "tokens and features of width {}",
          c_.vocab, c_.gamma, main_proj_.rows());
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
