// reference/model and optimized/model (the end-to-end tiny model): chunked appends equal one
// append, causality, rollback, the image's place in the sequence, Engram only where configured,
// DSpark drafting from the model's own target features; the optimized model against the
// reference tap by tap (routing bit-exact) on every backend and emulator schedule.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "bad_input.hpp"
#include "case_budget.hpp"
#include "cases/case.hpp"
#include "cases/dspark_case.hpp"
#include "cases/model_case.hpp"
#include "core/error.hpp"
#include "core/philox.hpp"
#include "problem/indexer.hpp"
#include "problem/sparse_attn.hpp"
#include "reference/drafter.hpp"
#include "reference/dspark.hpp"
#include "reference/model.hpp"
#include "reference/model_util.hpp"
#include "reference/vision.hpp"
#include "sim/model_traffic.hpp"
#include "sim/traffic.hpp"

namespace tandem {
namespace {

using reference::TinyModel;

const ModelConfig& tiny() {
  static const ModelConfig m = builtin_model("tiny");
  return m;
}

// Building the model takes most of a case's time; an emptied cache (rollback to 0) is a fresh
// model (the Rollback test checks that a rolled-back model continues exactly).
TinyModel& fresh(int which) {
  static TinyModel models[2] = {TinyModel(tiny()), TinyModel(tiny())};
  models[which].rollback(0);
  return models[which];
}

std::vector<int32_t> text(int n, uint64_t seed) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i)
    ids.push_back(int32_t(philox_draw(seed, 5, uint32_t(i)).v[0] % tiny().engram.vocab));
  return ids;
}

// A forward pass costs ~0.1 s (Engram's 6144-wide rows in double), so these exactness
// properties run a handful of seeded cases (6 at RapidCheck's default budget) rather than
// RapidCheck's hundred.
const uint64_t kCases = test::scaled_cases(6);

uint32_t draw(uint64_t seed, uint32_t i, uint32_t lo, uint32_t hi) {  // in [lo, hi)
  return lo + philox_draw(seed, 6, i).v[0] % (hi - lo);
}

TEST(Model, ChunkedAppendsEqualOneAppend) {
  for (uint64_t seed = 0; seed < kCases; ++seed) {
    const int n = int(draw(seed, 0, 2, 10)), split = int(draw(seed, 1, 1, uint32_t(n)));
    const auto ids = text(n, seed);
    TinyModel &whole = fresh(0), &chunked = fresh(1);
    const Eigen::MatrixXd want = whole.append(ids);
    Eigen::MatrixXd got(n, whole.vocab());
    got.topRows(split) = chunked.append({ids.begin(), ids.begin() + split});
    got.bottomRows(n - split) = chunked.append({ids.begin() + split, ids.end()});
    // The KV cache and Engram's history carry everything across chunks: bit-identical.
    EXPECT_EQ(got, want) << "seed " << seed << " split " << split;
    EXPECT_TRUE(reference::identical(chunked.cache_snapshot(), whole.cache_snapshot()))
        << "seed " << seed;
    EXPECT_TRUE(reference::identical(chunked.target_features(), whole.target_features()))
        << "seed " << seed;
  }
}

TEST(Model, LaterTokensDoNotChangeEarlierLogits) {
  for (uint64_t seed = 0; seed < kCases; ++seed) {
    const int n = int(draw(seed, 2, 2, 9)), k = int(draw(seed, 3, 0, uint32_t(n)));
    auto ids = text(n, seed);
    TinyModel &a = fresh(0), &b = fresh(1);
    const Eigen::MatrixXd before = a.append(ids);
    ids[k] = (ids[k] + 1) % int32_t(tiny().engram.vocab);
    const Eigen::MatrixXd after = b.append(ids);
    EXPECT_EQ(after.topRows(k), before.topRows(k)) << "seed " << seed;
    EXPECT_NE(after.row(k), before.row(k)) << "seed " << seed;
  }
}

TEST(Model, RollbackThenAppendGivesTheSameLogitsAndCache) {
  const auto ids = text(9, 3);
  TinyModel m(tiny());
  m.append({ids.begin(), ids.begin() + 4});
  const Eigen::MatrixXd first = m.append({ids.begin() + 4, ids.end()});
  const Eigen::MatrixXd cache = m.cache_snapshot();
  m.rollback(4);
  EXPECT_EQ(m.cached(), 4);
  EXPECT_EQ(m.append({ids.begin() + 4, ids.end()}), first);
  EXPECT_TRUE(reference::identical(m.cache_snapshot(), cache));
}

// The image prompt's tests run the tiny model with a 168 x 126 image kept at its size (4 x 3
// visual tokens, 18 layout positions): the same blocks and caches over fewer positions than the
// 640 x 480 image's 206 (`tandem verify` and the emulator tests run that one).
const ModelConfig& image_config() {
  static const ModelConfig m = [] {
    ModelConfig c = tiny();
    c.vision.image_w = 168, c.vision.image_h = 126, c.vision.sizing.min_pixels = 0;
    return c;
  }();
  return m;
}
struct ImagePromptRun {
  reference::Prompt prompt;
  std::vector<reference::Tap> taps;
};
const ImagePromptRun& image_run() {
  static const ImagePromptRun run = [] {
    TinyModel m(image_config());
    ImagePromptRun r{m.make_prompt(11), {}};
    m.append_prompt(r.prompt, &r.taps);
    return r;
  }();
  return run;
}
const std::vector<reference::Tap>& prompt_taps() { return image_run().taps; }

const reference::Tap& tap(const std::string& name) {
  const auto& taps = prompt_taps();
  const auto it = std::find_if(taps.begin(), taps.end(), [&](auto& t) { return t.name == name; });
  if (it == taps.end()) throw std::runtime_error("no tap " + name);
  return *it;
}

TEST(Model, ImageTokensTakeTheLayoutsPlaces) {
  const reference::Prompt& p = image_run().prompt;
  const VisionConfig& v = image_config().vision;
  const auto g = reference::vision_geometry(v.image_w, v.image_h, v.sizing);
  EXPECT_EQ(g.visual_tokens(), 12);
  EXPECT_EQ(std::count(p.ids.begin(), p.ids.end(), reference::kImage), g.visual_tokens());
  EXPECT_EQ(p.visual.dim(0), g.visual_tokens());
  EXPECT_EQ(int64_t(p.ids.size()), tiny().shape.prompt_tokens + g.sequence_tokens());
  // The embedding tap holds the visual embeddings at the IMAGE positions, in order.
  const reference::Tap& embed = tap("embed");
  const int64_t d = tiny().residual.d;
  int64_t image = 0;
  for (size_t t = 0; t < p.ids.size(); ++t)
    if (p.ids[t] == reference::kImage) {
      for (int64_t i = 0; i < d; ++i)
        ASSERT_EQ(embed.value.data[t * d + i], p.visual.data[image * d + i]) << t;
      ++image;
    }
}

TEST(Model, EngramRunsAtItsLayersAndSkipsImagePositions) {
  const auto& ids = tiny().engram.layer_ids;
  for (int b = 0; b < tiny().shape.blocks; ++b) {
    const bool has = std::any_of(prompt_taps().begin(), prompt_taps().end(), [&](auto& t) {
      return t.name == "block" + std::to_string(b) + ".engram.x";
    });
    EXPECT_EQ(has, std::find(ids.begin(), ids.end(), b) != ids.end()) << "block " << b;
  }
  // Before Engram at block 1 is the state after block 0; only text positions change.
  const reference::Prompt& p = image_run().prompt;
  const auto& before = tap("block0.moe.x").value;
  const auto& after = tap("block1.engram.x").value;
  const int64_t w = 4 * tiny().residual.d;
  int changed_text = 0;
  for (size_t t = 0; t < p.ids.size(); ++t) {
    const bool same =
        std::equal(before.ptr() + t * w, before.ptr() + (t + 1) * w, after.ptr() + t * w);
    if (p.ids[t] < 0) {
      EXPECT_TRUE(same) << "image position " << t;
    }
    changed_text += p.ids[t] >= 0 && !same;
  }
  EXPECT_EQ(changed_text, tiny().shape.prompt_tokens);
}

TEST(Model, EveryTokenRoutesToTopKDistinctExperts) {
  // (Which biases a token's modality selects is checked on the gate itself, vision_props.)
  const auto& experts = tap("block0.moe.experts").value;
  const int k = tiny().vision.top_k;
  for (int64_t t = 0; t < experts.dim(0); ++t) {
    std::vector<double> row(experts.ptr() + t * k, experts.ptr() + (t + 1) * k);
    std::sort(row.begin(), row.end());
    EXPECT_EQ(std::unique(row.begin(), row.end()), row.end()) << t;
    EXPECT_GE(row.front(), 0);
    EXPECT_LT(row.back(), tiny().vision.experts);
  }
}

// Each index source's selection (problem/indexer.hpp): row t holds min(top-k, visible) distinct
// entries its token can see (j < floor((t + 1) / r)), then -1 only.
TEST(Model, SelectionsAreVisibleDistinctAndPadded) {
  const ModelShape& s = tiny().shape;
  int selectors = 0;
  for (int b = 0; b < s.blocks; ++b) {
    if (!s.is_index_source(b)) continue;
    ++selectors;
    const Tensor<double>& sel = tap(fmt::format("block{}.attn.selection", b)).value;
    const int r = s.compress_ratios[size_t(b)], k = s.index_topk;
    const int64_t T = sel.dim(0), N = kv_entries(T, r);
    ASSERT_EQ(sel.dim(1), k);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t valid = std::min<int64_t>(k, visible_entries(t, r, N));
      std::set<double> seen;
      for (int64_t i = 0; i < k; ++i) {
        const double j = sel.data[size_t(t * k + i)];
        if (i >= valid) {
          EXPECT_EQ(j, -1) << "block " << b << " token " << t;
          continue;
        }
        EXPECT_GE(j, 0) << "block " << b << " token " << t;
        EXPECT_LT(j, visible_entries(t, r, N)) << "block " << b << " token " << t;
        EXPECT_TRUE(seen.insert(j).second) << "block " << b << " token " << t;
      }
    }
  }
  EXPECT_EQ(selectors, int(s.index_source_layers.size()));
}

// The model's window lists (problem/model.hpp): row t holds positions start + t - W + 1 ..
// start + t, oldest first, -1 before 0, as slots of the ring: with a ring as long as the
// positions, the positions themselves; with a ring of W slots, the decode step's ring list
// (window_index_list); with a longer ring, position mod its length.
TEST(Model, WindowIndicesAreTheNewestPositionsUpToTheToken) {
  for (int W : {1, 3, 8, 128})
    for (int64_t start : {0, 2, 200})
      for (const int64_t ring : {int64_t(W), int64_t(W) + 61, start + 5}) {
        const Tensor<int32_t> idx = model_window_indices(start, 5, W, ring);
        ASSERT_EQ(idx.shape, (Shape{5, W}));
        for (int64_t t = 0; t < 5; ++t) {
          const std::vector<int32_t> list = window_index_list(start + t, W);
          EXPECT_EQ(idx.data[size_t(t * W + W - 1)], (start + t) % ring) << "the token's own";
          for (int i = 0; i < W; ++i) {
            const int32_t slot = idx.data[size_t(t * W + i)];
            const int64_t p = start + t - W + 1 + i;
            if (list[size_t(i)] == -1) {
              EXPECT_EQ(slot, -1) << W << " " << start << " " << t << " " << i;
              continue;
            }
            EXPECT_EQ(slot, p % ring);
            if (ring == W) EXPECT_EQ(slot, list[size_t(i)]);
            if (ring == start + 5) EXPECT_EQ(slot, p);
          }
        }
      }
}

// A forced tap replaces an element only with the other correct bf16 rounding of it: a bf16 value
// of the same sign whose bits are at most one step from the element's own rounding; the tap
// sees the run's own values.
TEST(ModelReference, TapAndSnapTakesOnlyANeighbouringBf16) {
  const float one_up = bf16_decode(0x3f81), two_up = bf16_decode(0x3f82);  // 1 + 2^-7, 1 + 2^-6
  const float own = 1.0f + 0x1p-9f;  // rounds to bf16 1.0 (0x3f80)
  reference::ForcedTaps forced{{"x", Tensor<float>({6}, {one_up, two_up, 1.0f + 0x1p-10f, -1.0f,
                                                         bf16_decode(0x3f7f), 0.0f})}};
  Tensor<float> values({6}, {own, own, own, own, own, -0.0f});
  Tensor<double> tapped;
  reference::tap_and_snap<float>(
      "x", values, [&](std::string, Tensor<double> t) { tapped = std::move(t); }, &forced);
  EXPECT_EQ(tapped.data[0], double(own));
  EXPECT_EQ(values.data, (std::vector<float>{one_up, own, own, own, bf16_decode(0x3f7f), -0.0f}));
  Tensor<float> other_shape({2, 3}, own);
  reference::tap_and_snap<float>(
      "x", other_shape, [](std::string, Tensor<double>) {}, &forced);
  EXPECT_EQ(other_shape.data, std::vector<float>(6, own));
}

// A ring one slot shorter than the positions a row holds (min(W, its position + 1)) would alias
// the oldest with the newest: refused; a ring exactly as long is enough.
TEST(Model, WindowIndicesRefuseARingShorterThanTheRow) {
  EXPECT_NO_THROW(model_window_indices(0, 2, 4, 2));  // rows of 1 and 2 positions
  expect_bad_input([] { model_window_indices(0, 2, 4, 1); },
                   "1 slots cannot hold a window of 4 at positions 0..1");
  EXPECT_NO_THROW(model_window_indices(0, 5, 4, 4));
  expect_bad_input([] { model_window_indices(0, 5, 4, 3); },
                   "3 slots cannot hold a window of 4 at positions 0..4");
  expect_bad_input([] { model_window_indices(200, 1, 128, 127); }, "127 slots");
  expect_bad_input([] { model_window_indices(0, 1, 0, 4); }, "a window of 0");
}

TEST(Model, DsparkDraftsFromTheModelsFeaturesAndKeepsGreedyText) {
  TinyModel plain(tiny()), spec(tiny());
  DsparkConfig c = tiny().dspark;
  c.vocab = int(plain.vocab());
  const reference::DsparkDrafter drafter(c, 3 * tiny().residual.d, tiny().seed);
  const auto prompt = text(5, 8);
  const auto want = reference::greedy_decode(plain, prompt, 6);
  reference::SpeculativeStats stats;
  const auto got = reference::speculative_greedy_decode(
      spec, prompt, 6,
      [&](const std::vector<int32_t>& t, int K) {
        EXPECT_EQ(spec.target_features().rows(), int64_t(t.size()) - 1);
        return drafter.propose(spec.target_features(), t.back(), K, {}).tokens;
      },
      [](int) { return 3; }, &stats);
  EXPECT_EQ(got, want);
  EXPECT_TRUE(reference::identical(spec.cache_snapshot(), plain.cache_snapshot()));
}

// The end-to-end model as the backbone of a scheduled DSpark batch: each request's greedy text
// is the one it gets alone without drafting, and after every pass (drafts appended, verified,
// the rejected ones rolled back) its whole cache (window records, compressor states, entries,
// index keys) is bit for bit the cache of its emitted text fed without drafting (issue 14 item
// 6).
TEST(Model, ScheduledDsparkBatchKeepsEachRequestsGreedyTextAndCache) {
  const std::vector<std::vector<int32_t>> prompts{text(5, 8), text(3, 9)};
  const int steps = 5;
  std::vector<std::unique_ptr<TinyModel>> models;
  std::vector<reference::BatchRequest> batch;
  DsparkConfig c = tiny().dspark;
  c.vocab = int(tiny().engram.vocab);  // the model's vocabulary
  const reference::DsparkDrafter drafter(c, 3 * tiny().residual.d, tiny().seed);
  for (const auto& prompt : prompts) {
    models.push_back(std::make_unique<TinyModel>(tiny()));
    const TinyModel* model = models.back().get();
    batch.push_back({models.back().get(), prompt, [&drafter, model](const auto& t, int K) {
                       const auto d = drafter.propose(model->target_features(), t.back(), K, {});
                       return reference::Proposal{d.tokens, d.p_draft, d.confidence};
                     }});
  }
  // Request r's plain twin is fed its emitted text as it grows (chunked appends equal one).
  int checked = 0;
  TinyModel* plain[2] = {&fresh(0), &fresh(1)};
  ASSERT_EQ(models.size(), 2u);
  const auto same_cache_as_plain = [&](int pass, const reference::BatchDecode& so_far) {
    for (size_t r = 0; r < models.size(); ++r) {
      const std::vector<int32_t>& text = so_far.text[r];
      const int64_t n = models[r]->cached(), fed = plain[r]->cached();
      ASSERT_LE(n, int64_t(text.size())) << "pass " << pass;
      if (n < fed) plain[r]->rollback(n);
      if (n > fed) plain[r]->append({text.begin() + fed, text.begin() + n});
      EXPECT_TRUE(reference::identical(models[r]->cache_snapshot(), plain[r]->cache_snapshot()))
          << "pass " << pass << " request " << r << " at " << n << " tokens";
      ++checked;
    }
  };
  const auto got = reference::speculative_batch_decode(
      batch, steps, [&](int) { return c.gamma; },
      reference::scheduler_admission(dspark_sps_profile(int(prompts.size()) * (1 + c.gamma))),
      {tiny().seed, 1.0, true}, reference::dspark_verify, same_cache_as_plain);
  EXPECT_EQ(checked, got.passes * int(models.size()));  // every pass observed
  for (size_t r = 0; r < prompts.size(); ++r) {
    TinyModel& alone = fresh(0);  // greedy over the float distributions verification reads
    EXPECT_EQ(got.text[r], reference::greedy_decode_float(alone, prompts[r], steps))
        << "request " << r;
    EXPECT_TRUE(reference::identical(models[r]->cache_snapshot(), alone.cache_snapshot()));
  }
}

TEST(Model, BadPromptsNameTheProblem) {
  TinyModel m(tiny());
  EXPECT_THROW(m.append({1, int32_t(m.vocab())}), BadInput);
  EXPECT_THROW(m.append({-1}), BadInput);
  EXPECT_THROW(m.rollback(m.cached() + 1), BadInput);  // rollback keeps a prefix only
  reference::Prompt p = m.make_prompt(11);
  p.visual = Tensor<double>({p.visual.dim(0) - 1, tiny().residual.d});
  EXPECT_THROW(m.append_prompt(p), BadInput);
}

// The reference weights and their float copy for the optimized model.
struct SharedWeights {
  explicit SharedWeights(const ModelConfig& m)
      : ref(reference::tiny_model_weights(m)), opt(optimized_model_weights(ref)) {}
  reference::TinyModelWeights ref;
  ModelWeights opt;
};
const SharedWeights& weights() {  // the tiny model's, built once
  static const SharedWeights w(tiny());
  return w;
}

// The released attention's LoRAs in the reference (reference/model_cache.hpp), on block 0's
// weights: the latent over its gain and every query head (the per-head norm, no gain) have unit
// RMS up to eps; the output latent's group g reads group g's heads alone.
TEST(Model, QueryHeadsHaveUnitRmsAndOutputGroupsReadTheirOwnHeads) {
  const ModelConfig& m = tiny();
  const ModelWeights::Attention& w = weights().ref.blocks[0].attn;
  const reference::LoraMats<double> lora = reference::lora_mats<double>(w);
  const int64_t H = m.shape.heads, G = m.shape.lora.o_groups, T = 3, D = kKvMainDims;
  const double eps = m.residual.norm_eps;
  std::map<std::string, Tensor<double>> taps;
  const reference::TapSink sink = [&](std::string n, Tensor<double> v) { taps[n] = std::move(v); };
  std::vector<reference::Vec<double>> y;
  for (int64_t t = 0; t < T; ++t)
    y.push_back(
        reference::seeded_rows<double>({7, uint32_t(t), 1, m.residual.d, -1, 1}, 0, 1).transpose());
  auto mean_square = [](const double* v, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += v[i] * v[i];
    return s / double(n);
  };
  const auto latent = reference::query_latent<double>(lora, y, eps, "a", sink);
  for (const auto& l : latent) {
    const reference::Vec<double> unit = l.cwiseQuotient(lora.q_norm);
    EXPECT_NEAR(mean_square(unit.data(), unit.size()), 1.0, 1e-4);  // eps 1e-6 on ~0.1 and up
  }
  const Tensor<double> q =
      reference::head_queries<double>(lora, latent, H, eps, "a", sink, nullptr);
  ASSERT_EQ(q.shape, (Shape{T, H, D}));
  EXPECT_EQ(taps.at("a.q_proj").data, q.data);
  for (int64_t h = 0; h < T * H; ++h) EXPECT_NEAR(mean_square(q.ptr() + h * D, D), 1.0, 1e-4);

  Tensor<double> o({T, H, D});
  for (size_t i = 0; i < o.data.size(); ++i) o.data[i] = std::sin(0.37 * double(i));
  reference::attention_output<double>(lora, o, int(G), "a", sink);
  const Tensor<double> before = taps.at("a.o_latent");
  const int64_t per_group = H / G * D, rank = m.shape.lora.o_rank;
  for (int64_t t = 0; t < T; ++t)  // group 1's heads change
    for (int64_t i = 0; i < per_group; ++i) o.data[size_t(t * H * D + per_group + i)] += 0.5;
  const std::vector<reference::Vec<double>> f =
      reference::attention_output<double>(lora, o, int(G), "a", sink);
  const Tensor<double>& after = taps.at("a.o_latent");
  ASSERT_EQ(after.shape, (Shape{T, G * rank}));
  EXPECT_EQ(f.size(), size_t(T));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < G; ++g) {
      bool same = true;
      for (int64_t r = 0; r < rank; ++r)
        same = same && before.data[size_t(t * G * rank + g * rank + r)] ==
                           after.data[size_t(t * G * rank + g * rank + r)];
      EXPECT_EQ(same, g != 1) << "token " << t << " group " << g;
    }
}

// A decision the float baseline takes differently from the truth (a near tie) fails the run,
// the baseline no longer bounding what follows, unless both references follow the kernels'
// decision (a forced tap: the drafter's tokens); the kernels' decision must equal the truth's
// either way. (v4.1-flash's sampled drafter row met such a tie: the kernels drew the truth's
// token, the float baseline the next one.)
TEST(Model, ABaselineNearTieFailsUnlessTheDecisionIsFollowed) {
  auto check = [](double kernel, double baseline, bool followed) {
    ModelReference ref;
    ref.truth = {{"draft.tokens", Tensor<double>({2}, {4, 7})}};
    ref.baseline = {{"draft.tokens", Tensor<double>({2}, {4, baseline})}};
    ModelRun out;
    out.taps = {{"draft.tokens", Tensor<float>({2}, {4, float(kernel)})}};
    if (followed) ref.forced["draft.tokens"] = out.taps[0].value;
    const std::vector<TensorCheck> c = compare_model(ref, out);
    return c.size() == 1 && c[0].result.pass;
  };
  EXPECT_TRUE(check(7, 7, false));
  EXPECT_FALSE(check(7, 8, false));  // the baseline's tie: it cannot bound what follows
  EXPECT_TRUE(check(7, 8, true));    // everything after follows the kernels' token
  EXPECT_FALSE(check(8, 8, true));   // the kernels' token is not the truth's
  EXPECT_FALSE(check(8, 7, false));
}

// Text prompts of 1..40 seeded ids (chunks the size of a prefill or a decode step).
ModelPrompt text_prompt(uint64_t seed) {
  return {text(int(draw(seed, 2, 1, 41)), seed), Tensor<double>({0, tiny().residual.d}), {}};
}

// image.{grid,tokens,embed} with an image, embed, 7 per block, one per Engram layer, head.y,
// logits; and the attention's taps: its query latent, query projection, queries, output and
// output latent, 2 for a window
// owner's records, 2 for a kv source's entries (when the prompt makes one), 5 for an index
// source's keys (when there are entries), queries and selection.
size_t expected_taps(const ModelPrompt& p) {
  const ModelShape& s = tiny().shape;
  const int64_t T = int64_t(p.ids.size());
  size_t n = (p.patches.data.empty() ? 0 : 3) + 1 + 12 * size_t(s.blocks) +
             tiny().engram.layer_ids.size() + 2;
  for (int b = 0; b < s.blocks; ++b) {
    const int r = s.compress_ratios[size_t(b)];
    const bool entries = r > 0 && T >= r;
    n += s.kv_source(b) == b ? 2 + (r > 0 && entries ? 2 : 0) : 0;
    n += s.is_index_source(b) ? 3 + (entries ? 2 : 0) : 0;
  }
  return n;
}

void expect_optimized_matches_reference(const ModelPrompt& p, const RunOptions& opt,
                                        const std::string& what) {
  const ModelRun out = run_model(tiny(), weights().opt, p, opt);
  ModelReference ref = run_model_reference(tiny(), weights().ref, p, &out);
  const std::vector<TensorCheck> checks = check_model(tiny(), weights().ref, p, ref, out);
  EXPECT_EQ(checks.size(), expected_taps(p)) << what;
  for (const TensorCheck& c : checks)
    ASSERT_TRUE(c.result.pass) << what << ": first divergence at " << c.name << ": "
                               << c.result.summary();
}

// Text prompts here (a 218-token image prompt costs ~25 s under the emulator); `tandem verify`
// runs the image prompt, and the CUDA test runs three.
TEST(ModelEmu, OptimizedMatchesReferenceTapByTap) {
  for (uint64_t seed = 0; seed < kCases; ++seed)
    expect_optimized_matches_reference(text_prompt(seed), {}, fmt::format("text seed {}", seed));
}

TEST(ModelEmu, SameTapsUnderEverySchedule) {
  const ModelPrompt p{text(8, 4), Tensor<double>({0, tiny().residual.d}), {}};
  const ModelRun want = run_model(tiny(), weights().opt, p, {});
  for (const emu::Schedule& s : emu::test_schedules()) {
    RunOptions opt;
    opt.schedule = s;
    // NOTE: the same block size: sparse attention splits a token's indices over the block's
    // warps (each warp's online softmax, merged in warp order), so its rounding follows the
    // warp count (its own properties compare block sizes within tolerance).
    const ModelRun got = run_model(tiny(), weights().opt, p, opt);
    ASSERT_EQ(got.taps.size(), want.taps.size());
    for (size_t i = 0; i < want.taps.size(); ++i)
      EXPECT_EQ(got.taps[i].value.data, want.taps[i].value.data)
          << s.name() << " " << want.taps[i].name;
  }
}

// The image span's START and END markers route with the vision-language biases, as its other
// positions (every position of the span has an image type): here without patches, so that a text
// prompt's cost shows the routing of the markers alone.
TEST(ModelEmu, ImageMarkersRouteWithTheVisionBiases) {
  std::vector<int32_t> ids = text(8, 3);
  ids[2] = kStart, ids[5] = kEnd;
  expect_optimized_matches_reference({ids, Tensor<double>({0, tiny().residual.d}), {}}, {},
                                     "START and END in a text prompt");
}

// Another block size: sparse attention's warps split the indices otherwise (other bits), still
// within the tolerance policy tap by tap.
TEST(ModelEmu, AnotherBlockSizeMatchesReferenceTapByTap) {
  expect_optimized_matches_reference(text_prompt(7), {Backend::emu, {}, 64}, "64 threads");
}

// The tiny mix [0, 2, 2, 1] with index sources 1 and 3: window-only, an r = 2 index source, its
// reuser, an r = 1 index source (what the decode rows below are grouped by).
TEST(Model, BlockSelectionsFollowTheLayerMix) {
  const ModelShape& s = tiny().shape;
  ASSERT_EQ(s.compress_ratios, (std::vector<int>{0, 2, 2, 1}));
  EXPECT_EQ(sim::model_block_selection(s, 0), KvSelection::window);
  EXPECT_EQ(sim::model_block_selection(s, 1), KvSelection::scan);
  EXPECT_EQ(sim::model_block_selection(s, 2), KvSelection::reuse);
  EXPECT_EQ(sim::model_block_selection(s, 3), KvSelection::scan);
}

// A text chunk's (no) IMAGE embeddings.
Tensor<float> no_image() { return Tensor<float>({0, tiny().residual.d}); }

// A decode step's cache reads from the emulator's counts against `tandem traffic --preset tiny`'s
// decode rows at context pos + 1 (the tiny model's layer mix), per attention kind: sparse
// attention's = the window and the selected entries (read once per group of four heads), the
// indexer's = its scan of the visible keys; per ratio r >= 2 the compressor's = r x the row's
// per-step state at the steps that complete an entry, none at the others. An r = 1 source keeps
// no state between steps (the token's own projection is its entry, through the kernel's
// scratch: the byte model counts that, the row has none).
void expect_kv_reads_are_the_traffic_rows(const ModelRun& step, int64_t pos) {
  const ModelShape& s = tiny().shape;
  const int64_t context = pos + 1;
  std::vector<uint64_t> attn, scan, state;  // kv_cache bytes read, in block order
  for (const LaunchCounts& l : step.launches) {
    const uint64_t kv = l.read_bytes(Traffic::kv_cache);
    if (l.kernel.starts_with("sparse_decode_attn")) attn.push_back(kv);
    if (l.kernel.starts_with("index_logits")) scan.push_back(kv);
    if (l.kernel.starts_with("kv_compress_decode")) state.push_back(kv);
  }
  ASSERT_EQ(attn.size(), size_t(s.blocks));
  const uint64_t groups = uint64_t(s.heads) / kSparseAttnHeadGroup;
  std::map<std::string, std::array<uint64_t, 3>> kinds;  // layers, window + selected, scan
  std::map<int, uint64_t> states;                        // by ratio
  size_t next_scan = 0, next_state = 0;
  for (int b = 0; b < s.blocks; ++b) {
    const int r = s.compress_ratios[size_t(b)];
    const std::string name =
        fmt::format("r={} {}", r, kv_selection_name(sim::model_block_selection(s, b)));
    auto& kind = kinds[name];
    ++kind[0];
    ASSERT_EQ(attn[size_t(b)] % groups, 0u);
    kind[1] += attn[size_t(b)] / groups;
    if (s.is_index_source(b) && kv_entries(context, r) > 0) kind[2] += scan.at(next_scan++);
    if (s.kv_source(b) == b && r > 0) {
      const uint64_t read = state.at(next_state++);
      if (r >= 2) states[r] += read;
    }
  }
  EXPECT_EQ(next_scan, scan.size());
  EXPECT_EQ(next_state, state.size());
  size_t state_rows = 0;
  sim::Workload w;
  w.context = context;
  const sim::Report report = sim::simulate(sim::builtin_preset("tiny"), w);
  ASSERT_FALSE(report.kv_decode.empty());
  for (const sim::KvDecodeRead& row : report.kv_decode) {
    if (row.kind.ends_with("compressor states")) {
      const int r = std::stoi(row.kind.substr(2));
      EXPECT_EQ(states[r], kv_decode_emits(pos, r) ? uint64_t(r * row.states) : 0u)
          << row.kind << " at position " << pos;
      ++state_rows;
      continue;
    }
    ASSERT_TRUE(kinds.contains(row.kind)) << row.kind;
    const auto& got = kinds[row.kind];
    EXPECT_EQ(got[0], uint64_t(row.layers)) << row.kind;
    EXPECT_EQ(got[1], uint64_t(row.window + row.selected)) << row.kind << " at position " << pos;
    EXPECT_EQ(got[2], uint64_t(row.index_scan)) << row.kind << " at position " << pos;
    EXPECT_EQ(row.states, 0) << row.kind;
    kinds.erase(row.kind);
  }
  EXPECT_TRUE(kinds.empty()) << "an attention kind the traffic rows leave out";
  EXPECT_EQ(state_rows, states.size()) << "a compressing ratio the traffic rows leave out";
}

// An optimized sequence beside the reference continuing its own cache: each text chunk goes to
// both, is compared tap by tap and its launches against the byte model at the chunk's position.
struct CheckedSequence {
  explicit CheckedSequence(const ModelConfig& config = tiny(), const SharedWeights& w = weights())
      : m(config), model(config, w.opt, RunOptions{}), ref(config, w.ref) {}
  const ModelConfig& m;
  OptimizedModel model;
  ModelReferenceSequence ref;
  ModelRun last;  // the last chunk's run

  void append(const std::vector<int32_t>& ids, const std::string& what) {
    const int64_t start = model.length();
    last = model.append(ids, no_image());
    const ModelPrompt chunk{ids, Tensor<double>({0, m.residual.d}), {}};
    for (const TensorCheck& c : ref.append(chunk, last))
      ASSERT_TRUE(c.result.pass) << what << ": first divergence at " << c.name << ": "
                                 << c.result.summary();
    EXPECT_TRUE(same_traffic(last.launches, sim::predict_model(m, ids, start))) << what;
  }
};

// Decode steps on the optimized model's own cache (OptimizedModel: the window ring, the
// compressor's decode kernel with its state carried, the index keys of new entries only): a
// prefill, then the greedy token one at a time. Each step matches the reference continuing its
// own cache tap by tap, moves exactly the byte model's bytes for a chunk at its position, and
// reads the cache as `tandem traffic`'s decode rows say.
void expect_decode_steps(int prefill, int steps, uint64_t seed) {
  CheckedSequence seq;
  std::vector<int32_t> ids = text(prefill, seed);
  for (int step = 0; step <= steps; ++step) {
    const int64_t start = seq.model.length();
    ASSERT_NO_FATAL_FAILURE(
        seq.append(ids, fmt::format("prefill {} step {} (position {})", prefill, step, start)));
    if (step > 0) expect_kv_reads_are_the_traffic_rows(seq.last, start);
    ids = {greedy_token(seq.last)};
  }
}

// The ring holds max(window, prefill) slots: both sequences wrap it. (The sanitizer pass's
// quarter budget runs the first alone: ~38 s under ASan for both.)
TEST(ModelEmu, DecodeStepsMatchReferenceTheByteModelAndTheTrafficRows) {
  expect_decode_steps(3, 6, 11);  // the window filling; fewer entries than the top-k
  if (test::scaled_cases(4) >= 2) expect_decode_steps(12, 4, 12);  // a ring longer than the window
}

// A chunk after the first holds at most ring - window + 1 tokens (no record its own queries read
// is overwritten): a chunk of that many, where the ring's slots turn over inside the chunk,
// matches the reference; one more token, or a bad id, is refused and leaves the sequence as it
// was (the next step still matches the reference, which never saw the refused chunks).
TEST(ModelEmu, LaterChunksUpToTheRingsRoomMatchReferenceAndLongerOnesAreRefused) {
  CheckedSequence seq;
  // A ring of 10 slots: later chunks of 10 - 8 + 1 tokens.
  ASSERT_NO_FATAL_FAILURE(seq.append(text(10, 3), "prefill"));
  ASSERT_NO_FATAL_FAILURE(seq.append(text(3, 4), "a chunk of 3 at position 10"));
  expect_bad_input([&] { seq.model.append(text(4, 5), no_image()); }, "the ring holds 10 slots");
  std::vector<int32_t> bad = text(2, 6);
  bad.back() = int32_t(tiny().engram.vocab);
  expect_bad_input([&] { seq.model.append(bad, no_image()); }, "outside [0, 4096)");
  EXPECT_EQ(seq.model.length(), 13);
  seq.append(text(1, 7), "a decode step after the refused chunks");
}

// A vocabulary of three unembedding chunks (the last one short) and an expert table past
// kMoeMaterialisedValues (V4.1's 384 experts of 2 x 2304, at the tiny width: 113M values, never
// held): the embedding's rows, the unembedding's chunks and a chunk's routed experts are
// generated where they are read, by each side its own way. A prefill and two decode steps match
// the reference tap by tap and the byte model (a dense_rows launch per unembedding chunk).
TEST(ModelEmu, ChunkedUnembeddingAndRoutedExpertsMatchReferenceAndTheByteModel) {
  nlohmann::json j = builtin_model_json("tiny");
  j["engram"]["vocab"] = 2 * kUnembedChunkRows + 1000;
  j["vision"]["experts"] = 384, j["model"]["ffn_hidden"] = 2304;
  const ModelConfig m = parse_model_config(j, "wide tiny");
  ASSERT_FALSE(moe_materialises_every_expert(m.vision.experts, m.shape.ffn_hidden, m.residual.d));
  const SharedWeights w(m);
  CheckedSequence seq(m, w);
  std::vector<int32_t> ids;  // ids from the whole vocabulary: every chunk's rows are embedded
  for (uint32_t i = 0; i < 6; ++i)
    ids.push_back(int32_t(philox_draw(7, 5, i).v[0] % m.engram.vocab));
  ids[0] = int32_t(m.engram.vocab - 1);
  for (int step = 0; step < 3; ++step) {
    ASSERT_NO_FATAL_FAILURE(seq.append(ids, fmt::format("step {}", step)));
    const auto& logits = seq.last.taps.back();
    ASSERT_EQ(logits.name, "logits");
    ASSERT_EQ(logits.value.shape, (Shape{int64_t(ids.size()), m.engram.vocab}));
    ids = {greedy_token(seq.last)};
  }
}

// Blocks standing for sampled release layers (model.layers): Engram runs before the block that
// stands for each of its layers (here layers 5 and 9 at blocks 2 and 3), in the reference, the
// optimized model and the byte model alike.
TEST(ModelEmu, EngramRunsAtTheBlocksStandingForItsLayers) {
  nlohmann::json j = builtin_model_json("tiny");
  j["model"]["layers"] = {0, 1, 5, 9}, j["engram"]["layer_ids"] = {5, 9};
  const ModelConfig m = parse_model_config(j, "sampled tiny");
  const SharedWeights w(m);
  CheckedSequence seq(m, w);
  ASSERT_NO_FATAL_FAILURE(seq.append(text(7, 21), "prefill"));
  std::vector<std::string> engram;
  for (const ModelTap& t : seq.last.taps)
    if (t.name.ends_with(".engram.x")) engram.push_back(t.name);
  EXPECT_EQ(engram, (std::vector<std::string>{"block2.engram.x", "block3.engram.x"}));
  ASSERT_NO_FATAL_FAILURE(seq.append({greedy_token(seq.last)}, "a decode step"));
}

// model.num_hash_layers: the blocks standing for layers below it (here 0 and 1 of layers 0, 1, 5,
// 9) route each text token to its id's row of their tid2eid table (and have no text bias); the
// others rank. Both models and the byte model agree (CheckedSequence), prefill and decode.
TEST(ModelEmu, HashBlocksRouteTextTokensByTheirIdsRow) {
  nlohmann::json j = builtin_model_json("tiny");
  j["model"]["layers"] = {0, 1, 5, 9}, j["engram"]["layer_ids"] = {5, 9};
  j["model"]["num_hash_layers"] = 2;
  const ModelConfig m = parse_model_config(j, "hashed tiny");
  const SharedWeights w(m);
  CheckedSequence seq(m, w);
  std::vector<int32_t> ids = text(9, 31);
  for (int step = 0; step < 2; ++step) {
    ASSERT_NO_FATAL_FAILURE(seq.append(ids, step ? "a decode step" : "prefill"));
    const int64_t k = m.vision.top_k;
    for (int b = 0; b < m.shape.blocks; ++b) {
      const auto& blk = w.opt.blocks[size_t(b)];
      const auto tap = std::ranges::find_if(seq.last.taps, [&](const ModelTap& t) {
        return t.name == fmt::format("block{}.moe.experts", b);
      });
      ASSERT_NE(tap, seq.last.taps.end());
      EXPECT_EQ(blk.tid2eid.shape, b < 2 ? (Shape{m.engram.vocab, k}) : Shape{}) << b;
      EXPECT_EQ(blk.bias_text.size(), b < 2 ? 0u : size_t(m.vision.experts)) << b;
      if (b >= 2) continue;
      for (size_t t = 0; t < ids.size(); ++t)
        for (int64_t e = 0; e < k; ++e)
          ASSERT_EQ(tap->value.data[t * size_t(k) + size_t(e)],
                    float(blk.tid2eid.data[size_t(ids[t] * k + e)]))
              << "block " << b << " token " << t;
    }
    ids = {greedy_token(seq.last)};
  }
  // The tables come after every other weight: the blocks' routers keep their values.
  EXPECT_EQ(w.opt.blocks[1].router.data, weights().opt.blocks[1].router.data);
  EXPECT_EQ(w.opt.blocks[3].w_in[2].whole().data, weights().opt.blocks[3].w_in[2].whole().data);
}

// model.prompt_image false: `tandem verify`'s model row runs the prompt's text alone (no image
// path, no image launches in the byte model), decodes and passes.
TEST(ModelEmu, ATextOnlyVerificationPromptRunsWithoutTheImagePath) {
  nlohmann::json j = builtin_model_json("tiny");
  j["model"]["prompt_image"] = false;
  const ModelConfig m = parse_model_config(j, "text tiny");
  const RunOptions opt;
  const auto& components = registry();
  const auto model =
      std::ranges::find_if(components, [](const Component& c) { return c.name == "model"; });
  ASSERT_NE(model, components.end());
  const VerifyRow row = model->verify_rows(m, opt).at(0).run();
  EXPECT_TRUE(row.pass) << row.first_divergence << ": " << row.detail;
  EXPECT_NE(row.name.find("12 tokens (0 image)"), std::string::npos) << row.name;
  for (const LaunchCounts& l : row.launches)
    EXPECT_FALSE(l.kernel.starts_with("vision")) << l.kernel;
  // Its image path's weights are not made (the streams after them keep their values), and an
  // image is refused by both models.
  const SharedWeights w(m);
  EXPECT_TRUE(w.ref.blocks[0].router == weights().ref.blocks[0].router);
  EXPECT_EQ(w.opt.blocks[3].attn.index_wq.data, weights().opt.blocks[3].attn.index_wq.data);
  const ModelPrompt image = model_prompt(tiny(), 3, true);
  expect_bad_input([&] { reference::embed_patches<double>(w.ref.vision, image.patches); },
                   "model.prompt_image is false");
  expect_bad_input([&] { run_image_embedding(w.opt, image.patches, opt); },
                   "model.prompt_image is false");
}

// check_model_size counts what a run holds or generates at once: V4.1-Flash's model fits (the
// vocabulary-sized matrices and the experts generated where read); 512 experts of 16384 routed by
// the image prompt's 218 tokens (1.07G values for one block's routed experts) do not, by its 12
// text tokens (at most 72 experts) they do.
TEST(Model, SizeCheckCountsWhatARunHoldsAtOnce) {
  EXPECT_NO_THROW(check_model_size(builtin_model("v4.1-flash"), "v4.1-flash"));
  ModelConfig m = tiny();
  m.vision.experts = 512, m.shape.ffn_hidden = 16384;
  expect_bad_input([&] { check_model_size(m, "big.json"); }, "big.json: an end-to-end run holds");
  m.shape.prompt_image = false;
  EXPECT_NO_THROW(check_model_size(m, "text.json"));
}

TEST(ModelCuda, OptimizedMatchesReferenceTapByTap) {
  const BackendStatus cuda = cuda_status();
  if (!cuda.available) GTEST_SKIP() << cuda.detail;
  RunOptions opt;
  opt.backend = Backend::cuda;
  for (uint64_t seed = 0; seed < kCases; ++seed)
    expect_optimized_matches_reference(text_prompt(seed), opt, fmt::format("text seed {}", seed));
  for (uint64_t seed = 0; seed < 3; ++seed)
    expect_optimized_matches_reference(model_prompt(tiny(), seed, true), opt,
                                       fmt::format("image seed {}", seed));
}

TEST(ModelEmu, BadPromptsNameTheProblem) {
  const ModelPrompt ok = text_prompt(1);
  auto run = [](ModelPrompt p) { return [p] { run_model(tiny(), weights().opt, p, {}); }; };
  ModelPrompt p = ok;
  p.ids.back() = int32_t(tiny().engram.vocab);
  expect_bad_input(run(p), "outside [0, 4096)");
  p = ok, p.ids.front() = -1;
  expect_bad_input(run(p), "not an image marker");
  p = ok, p.ids.clear();
  expect_bad_input(run(p), "no tokens");
  p = ok, p.ids.push_back(kImage);
  expect_bad_input(run(p), "visual embeddings");
  p.visual = Tensor<double>({1, tiny().residual.d}, 0.5);
  p.visual.data[3] = NAN;
  expect_bad_input(run(p), "model prompt 'visual'[0, 3] is not finite (nan)");
  p = model_prompt(tiny(), 2, true);
  p.patches.data[5] = NAN;
  expect_bad_input(run(p), "model image 'patches'[0, 0, 5] is not finite (nan)");
  p.patches = Tensor<float>({2, 2, 100});
  expect_bad_input(run(p), "patches must be");
  ModelWeights fewer = weights().opt;
  fewer.blocks.pop_back();
  expect_bad_input([&] { run_model(tiny(), fewer, ok, {}); }, "model weights");
}

}  // namespace
}  // namespace tandem
