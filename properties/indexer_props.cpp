// The selection (problem/indexer.hpp, issue 14 item 2): topk_select against the reference bit for
// bit, and the selection's own invariants checked without the reference: the k best visible
// entries, best first, ties to the lower index, -0 == +0, -1 padding exactly when fewer are
// visible; scores past a row's length never read (NaN there changes nothing); identical under
// every schedule and block size; counted bytes == the simulator's; hostile lengths refused. V4.1's
// candidate blocks and the selection inside them likewise.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <set>
#include <span>

#include "bad_input.hpp"
#include "cases/indexer_case.hpp"
#include "problem/kv_record.hpp"
#include "sim/indexer_traffic.hpp"

namespace tandem {
namespace {

// Whether a row's selection is the top-k by (score, then lower index) of its visible scores.
void assert_is_top_k(const float* row, int64_t length, const int32_t* sel, int k) {
  const int64_t chosen = std::min<int64_t>(k, length);
  std::set<int32_t> picked;
  for (int i = 0; i < k; ++i) {
    if (i >= chosen) {
      RC_ASSERT(sel[i] == -1);
      continue;
    }
    RC_ASSERT(sel[i] >= 0 && sel[i] < length);
    RC_ASSERT(picked.insert(sel[i]).second);
    if (i > 0)  // best first: score descending, ties by index ascending
      RC_ASSERT(row[sel[i - 1]] > row[sel[i]] ||
                (row[sel[i - 1]] == row[sel[i]] && sel[i - 1] < sel[i]));
  }
  if (chosen == 0) return;
  const int32_t last = sel[chosen - 1];
  for (int64_t j = 0; j < length; ++j) {  // nothing left out beats the last one chosen
    if (picked.count(int32_t(j))) continue;
    RC_ASSERT(row[j] < row[last] || (row[j] == row[last] && j > last));
  }
}

RC_GTEST_PROP(TopkEmu, KernelSelectsTheTopKAsTheReference, ()) {
  const int64_t T = *rc::gen::inRange(1, 4), n = *rc::gen::inRange(1, 3000);
  const int k = *rc::gen::element(1, 2, 7, 64, 512, 2048, *rc::gen::inRange(1, 2049));
  const int ratio = *rc::gen::element(1, 2, 4, 128);
  const int64_t start = *rc::gen::inRange<int64_t>(0, 4 * n);
  const double ties = *rc::gen::element(0.0, 0.3, 0.9, 1.0);
  const TopkInputs in =
      make_topk_inputs(T, n, k, ratio, start, ties, *rc::gen::arbitrary<uint64_t>());
  const auto schedules = emu::test_schedules();
  const RunOptions opt{Backend::emu, *rc::gen::elementOf(schedules), 32 * *rc::gen::inRange(1, 33)};
  const TopkOutputs out = run_topk_select(in, opt);
  for (int64_t t = 0; t < T; ++t)
    assert_is_top_k(in.scores.ptr() + t * n, in.lengths.data[size_t(t)], out.indices.ptr() + t * k,
                    k);
  for (const TensorCheck& c : compare_topk(in, out)) {
    RC_LOG() << c.name << ": " << c.result.summary() << "\n";
    RC_ASSERT(c.result.pass);
  }
  RC_ASSERT(same_traffic(out.launches, {sim::predict_topk_select(in.lengths.data, k)}));
  // What must not be read changes nothing (FlashMLA's check): NaN past every row's length.
  TopkInputs poisoned = in;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = in.lengths.data[size_t(t)]; j < n; ++j)
      poisoned.scores.data[size_t(t * n + j)] = NAN;
  RC_ASSERT(
      run_topk_select(poisoned, {Backend::emu, *rc::gen::elementOf(schedules), 32}).indices.data ==
      out.indices.data);
}

TEST(Topk, EdgeRows) {
  TopkInputs in;
  in.top_k = 4;
  // Nothing visible: nothing selected. All equal (+-0): the lowest indices. One visible.
  in.scores = Tensor<float>({3, 6}, std::vector<float>{NAN, NAN, NAN, NAN, NAN, NAN,           //
                                                       0.0f, -0.0f, 0.0f, -0.0f, 0.0f, -0.0f,  //
                                                       -3.5f, NAN, NAN, NAN, NAN, NAN});
  in.lengths = Tensor<int32_t>({3}, std::vector<int32_t>{0, 6, 1});
  const TopkOutputs out = run_topk_select(in, {});
  EXPECT_EQ(out.indices.data, (std::vector<int32_t>{-1, -1, -1, -1, 0, 1, 2, 3, 0, -1, -1, -1}));
  // The largest and smallest finite scores and denormals keep their order.
  in.scores =
      Tensor<float>({1, 6}, std::vector<float>{1e-45f, -3.4e38f, 3.4e38f, -1e-45f, 0.0f, -3.4e38f});
  in.lengths = Tensor<int32_t>({1}, std::vector<int32_t>{6});
  in.top_k = 6;
  EXPECT_EQ(run_topk_select(in, {Backend::emu, {}, 64}).indices.data,
            (std::vector<int32_t>{2, 0, 4, 3, 1, 5}));
}

TEST(Topk, BadInputNamesTheTensor) {
  TopkInputs in = make_topk_inputs(2, 10, 4, 1, 20, 0.2, 1);
  auto run = [](TopkInputs x) { return [x] { run_topk_select(x, {}); }; };
  TopkInputs bad = in;
  bad.scores.data[13] = NAN;
  expect_bad_input(run(bad), "topk input 'scores'[1, 3] is nan");
  bad = in, bad.scores.data[4] = INFINITY;
  expect_bad_input(run(bad), "'scores'[0, 4] is inf");
  bad = in, bad.top_k = 0;
  expect_bad_input(run(bad), "top_k 0");
  bad = in, bad.top_k = kTopkMax + 1;
  expect_bad_input(run(bad), "top_k 2049");
  bad = in, bad.scores = Tensor<float>({2, 0});
  expect_bad_input(run(bad), "topk input 'scores'");
  for (int32_t len : {-1, 11, INT32_MIN, INT32_MAX}) {
    bad = in, bad.lengths.data[1] = len;
    expect_bad_input(run(bad), fmt::format("'lengths'[1] = {}", len));
  }
  bad = in, bad.lengths = Tensor<int32_t>({3});
  expect_bad_input(run(bad), "'lengths': expected [2]");
}

// ================================================================ V4.1's candidate blocks
// Whether a row's kept blocks are the pinned newest and the best others by their max (ties to the
// lower block), ascending, -1 after; checked without the reference.
void assert_are_candidates(const float* row, int64_t length, int block, const int32_t* kept,
                           int keep) {
  const int64_t n_blocks = (length + block - 1) / block;
  const int64_t count = std::min<int64_t>(keep, n_blocks);
  for (int i = 0; i < keep; ++i) {
    RC_ASSERT((i < count) == (kept[i] != -1));
    if (i > 0 && i < count) RC_ASSERT(kept[i - 1] < kept[i]);
    if (i < count) RC_ASSERT(kept[i] >= 0 && kept[i] < n_blocks);
  }
  if (count == 0) return;
  RC_ASSERT(kept[count - 1] == n_blocks - 1);  // the newest block is pinned
  auto best = [&](int64_t b) {
    return *std::max_element(row + b * block, row + std::min<int64_t>(length, (b + 1) * block));
  };
  const std::set<int32_t> in_set(kept, kept + count);
  for (int64_t b = 0; b + 1 < n_blocks; ++b) {  // a dropped block beats no kept one
    if (in_set.count(int32_t(b))) continue;
    for (int64_t i = 0; i + 1 < count; ++i)
      RC_ASSERT(best(kept[i]) > best(b) || (best(kept[i]) == best(b) && kept[i] < b));
  }
}

RC_GTEST_PROP(CandidatesEmu, KernelsSelectAsTheReference, ()) {
  const int64_t T = *rc::gen::inRange(1, 4), n = *rc::gen::inRange(1, 3000);
  const int block = *rc::gen::element(1, 2, 8, 64), keep = *rc::gen::element(1, 2, 64, 2048);
  const int k = *rc::gen::element(1, 16, 512, *rc::gen::inRange(1, 2049));
  const int ratio = *rc::gen::element(1, 2);
  const int64_t start = *rc::gen::inRange<int64_t>(0, 2 * n);
  const double ties = *rc::gen::element(0.0, 0.3, 0.9, 1.0);
  const CandidateCase c = make_candidate_case(T, n, ratio, start, ties, block, keep, k,
                                              *rc::gen::arbitrary<uint64_t>());
  const auto schedules = emu::test_schedules();
  const RunOptions opt{Backend::emu, *rc::gen::elementOf(schedules), 32 * *rc::gen::inRange(1, 33)};
  const CandidateOutputs out = run_candidates(c, opt);
  for (int64_t t = 0; t < T; ++t) {
    assert_are_candidates(c.blocks.scores.ptr() + t * n, c.blocks.lengths.data[size_t(t)], block,
                          out.blocks.ptr() + t * keep, keep);
    // The later layer selects only inside the kept blocks.
    const std::set<int32_t> kept(c.topk.blocks.ptr() + t * keep,
                                 c.topk.blocks.ptr() + (t + 1) * keep);
    const int32_t* sel = out.indices.ptr() + t * k;
    for (int i = 0; i < k && sel[i] != -1; ++i) RC_ASSERT(kept.count(sel[i] / block) == 1u);
  }
  for (const TensorCheck& check : compare_candidates(c, out)) {
    RC_LOG() << check.name << ": " << check.result.summary() << "\n";
    RC_ASSERT(check.result.pass);
  }
  RC_ASSERT(
      same_traffic(out.launches, {sim::predict_candidate_blocks(c.blocks.lengths.data, block, keep),
                                  sim::predict_candidate_topk(c.topk)}));
  // What must not be read changes nothing: NaN past every row's length, in the newest (pinned)
  // block for the scorer, and outside the candidates for the later layer.
  CandidateCase poisoned = c;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t length = c.blocks.lengths.data[size_t(t)];
    const int64_t pinned = (length + block - 1) / block - 1;
    const std::set<int32_t> kept(c.topk.blocks.ptr() + t * keep,
                                 c.topk.blocks.ptr() + (t + 1) * keep);
    for (int64_t j = 0; j < n; ++j) {
      if (j >= length || j / block == pinned) poisoned.blocks.scores.data[size_t(t * n + j)] = NAN;
      if (j >= length || !kept.count(int32_t(j / block)))
        poisoned.topk.scores.data[size_t(t * n + j)] = NAN;
    }
  }
  const CandidateOutputs again =
      run_candidates(poisoned, {Backend::emu, *rc::gen::elementOf(schedules), 64});
  RC_ASSERT(again.blocks.data == out.blocks.data);
  RC_ASSERT(again.indices.data == out.indices.data);
}

// With every block kept, selecting inside the candidates is the plain top-k.
RC_GTEST_PROP(CandidatesEmu, EveryBlockKeptIsThePlainTopK, ()) {
  const int64_t n = *rc::gen::inRange(1, 1500);
  const int block = *rc::gen::element(1, 8, 16), k = *rc::gen::inRange(1, 600);
  const int keep = int((n + block - 1) / block);  // at most 1500 <= kTopkMax
  const CandidateCase c =
      make_candidate_case(2, n, 1, n - 2, 0.3, block, keep, k, *rc::gen::arbitrary<uint64_t>());
  const TopkInputs plain{c.topk.scores, c.topk.lengths, k};
  RC_ASSERT(run_candidates(c, {}).indices.data == run_topk_select(plain, {}).indices.data);
}

// V4.1's candidate scorer at its sizes: 20000 entries (2500 blocks of 8), 2048 kept, top-512.
TEST(CandidatesEmu, ReleaseSizes) {
  const CandidateCase c = make_candidate_case(1, 20000, 1, 19999, 0.3, 8, 2048, 512, 7);
  const CandidateOutputs out = run_candidates(c, {Backend::emu, {}, 1024});
  for (const TensorCheck& check : compare_candidates(c, out))
    EXPECT_TRUE(check.result.pass) << check.name << ": " << check.result.summary();
  EXPECT_EQ(out.blocks.data[2047], 2499);  // pinned
}

TEST(Candidates, BadInputNamesTheTensor) {
  const CandidateCase ok = make_candidate_case(2, 100, 1, 60, 0.2, 8, 4, 5, 1);
  auto run = [](CandidateTopkInputs x) { return [x] { run_candidate_topk(x, {}); }; };
  // ok's rows see 61 and 62 entries: 8 blocks each, 4 kept, ascending.
  ASSERT_EQ(ok.topk.blocks.data[3], 7);
  CandidateTopkInputs bad = ok.topk;
  for (int32_t b : {8, -2, INT32_MIN, INT32_MAX}) {
    bad = ok.topk, bad.blocks.data[5] = b;
    expect_bad_input(run(bad), fmt::format("candidate_topk input 'blocks'[1, 1] = {}", b));
  }
  bad = ok.topk, bad.blocks.data[1] = bad.blocks.data[0];
  expect_bad_input(run(bad), "'blocks'[0, 1]");  // a duplicate
  bad = ok.topk, std::swap(bad.blocks.data[1], bad.blocks.data[2]);
  expect_bad_input(run(bad), "not above the one before");
  bad = ok.topk, bad.blocks.data[1] = -1;
  expect_bad_input(run(bad), "'blocks'[0, 2] = ");  // -1 in the middle: a kept id after it
  bad = ok.topk, bad.blocks = Tensor<int32_t>({2, kTopkMax + 1}, -1);
  expect_bad_input(run(bad), "'blocks': expected [2, C in [1, 2048]]");
  bad = ok.topk, bad.scores.data[size_t(ok.topk.blocks.data[0] * 8)] = NAN;  // a candidate's
  expect_bad_input(run(bad), "candidate_topk input 'scores'[0, ");
  bad = ok.topk, bad.top_k = 0;
  expect_bad_input(run(bad), "top_k 0");
  CandidateBlocksInputs blocks = ok.blocks;
  blocks.keep = kTopkMax + 1;
  expect_bad_input([&] { run_candidate_blocks(blocks, {}); }, "keep 2049");
  blocks = ok.blocks, blocks.block = 0;
  expect_bad_input([&] { run_candidate_blocks(blocks, {}); }, "block 0");
  blocks = ok.blocks, blocks.lengths.data[0] = 101;
  expect_bad_input([&] { run_candidate_blocks(blocks, {}); }, "'lengths'[0] = 101");
}

// ================================================================ index_logits
RC_GTEST_PROP(IndexLogitsEmu, KernelMatchesReference, ()) {
  const KvFormat f = *rc::gen::element(KvFormat::idx_mxfp4, KvFormat::idx_fp8);
  const int64_t T = *rc::gen::inRange(1, 5), n = *rc::gen::inRange(0, 400);
  const int heads = *rc::gen::element(1, 3, 32, 64), ratio = *rc::gen::element(1, 2, 4);
  const int64_t start = *rc::gen::inRange<int64_t>(0, ratio * (n + 10));
  IndexLogitsInputs in = make_index_logits_inputs(
      f, T, heads, n, ratio, start, *rc::gen::inRange(1, 70), *rc::gen::arbitrary<uint64_t>());
  in.weight_scale = *rc::gen::element(1.0f, release_index_weight_scale(heads), 3.5f);
  const auto schedules = emu::test_schedules();
  const IndexLogitsOutputs out = run_index_logits(
      in, {Backend::emu, *rc::gen::elementOf(schedules), 32 * *rc::gen::inRange(1, 17)});
  for (const TensorCheck& c : compare_index_logits(in, out)) {
    RC_LOG() << c.name << ": " << c.result.summary() << "\n";
    RC_ASSERT(c.result.pass);
  }
  for (int64_t t = 0; t < T; ++t)  // DESIGN 5.5: j < floor((t + 1) / r), written out here
    RC_ASSERT(out.lengths.data[size_t(t)] == std::min<int64_t>(n, (start + t + 1) / ratio));
  RC_ASSERT(same_traffic(out.launches, {sim::predict_index_logits(f, T, heads, n, ratio, start)}));
  const IndexLogitsOutputs again =
      run_index_logits(in, {Backend::emu, *rc::gen::elementOf(schedules), 64});
  RC_ASSERT(compare_exact<float>(out.scores.span(), again.scores.span()).pass);
}

// The keys past a token's view are never read: with every byte of them NaN-coded, the token's
// scores are the same bits.
TEST(IndexLogits, KeysPastATokensViewAreNeverRead) {
  for (KvFormat f : {KvFormat::idx_mxfp4, KvFormat::idx_fp8}) {
    IndexLogitsInputs in = make_index_logits_inputs(f, 1, 4, 200, 4, 399, 16, 5);  // sees 100
    const IndexLogitsOutputs before = run_index_logits(in, {});
    const KvPageLayout at{kv_format_info(f), in.keys.page_size};
    for (int64_t j = 100; j < 200; ++j) {
      const int64_t slot = int64_t(in.page_table.data[size_t(j / 16)]) * 16 + j % 16;
      std::fill_n(in.key_pool.ptr() + at.code_at(slot), kv_format_info(f).record_bytes(),
                  uint8_t{0xff});
    }
    const IndexLogitsOutputs after = run_index_logits(in, {});
    EXPECT_EQ(after.lengths.data, std::vector<int32_t>{100});
    EXPECT_TRUE(compare_exact<float>(std::span(before.scores.data).first(100),
                                     std::span(after.scores.data).first(100))
                    .pass)
        << kv_format_name(f);
  }
}

TEST(IndexLogits, BadInputNamesTheField) {
  const IndexLogitsInputs ok =
      make_index_logits_inputs(KvFormat::idx_mxfp4, 2, 4, 40, 2, 60, 16, 1);
  auto run = [](IndexLogitsInputs x) { return [x] { run_index_logits(x, {}); }; };
  IndexLogitsInputs bad = ok;
  bad.page_table.data[1] = 3;  // the pool holds 4 pages: 0..3 is inside; 4 is past it
  run_index_logits(bad, {});
  for (int32_t page : {4, -1, INT32_MIN, INT32_MAX}) {
    bad = ok, bad.page_table.data[2] = page;
    expect_bad_input(run(bad), fmt::format("'page_table'[2] = {}: past the pool", page));
  }
  bad = ok, bad.page_table = Tensor<int32_t>({2});
  expect_bad_input(run(bad), "'page_table': expected [3] pages");
  bad = ok, bad.heads = 65, bad.w = Tensor<float>({2, 65});
  expect_bad_input(run(bad), "heads 65");
  bad = ok, bad.q_records.data.pop_back(), bad.q_records.shape[0] -= 1;
  expect_bad_input(run(bad), "'q_records'");
  bad = ok, bad.w.data[4 + 2] = NAN;  // w [T, heads] = [2, 4]
  expect_bad_input(run(bad), "'w'[1, 2] is not finite (nan)");
  for (float scale : {0.0f, -1.0f, NAN, INFINITY}) {
    bad = ok, bad.weight_scale = scale;
    expect_bad_input(run(bad), "weight_scale");
  }
  bad = ok, bad.keys.format = KvFormat::v41_fp4;
  expect_bad_input(run(bad), "expected idx_mxfp4 or idx_fp8");
  expect_bad_input([&] { run_index_logits(ok, {Backend::emu, {}, 1024}); }, "shared memory");
}

TEST(TopkCuda, KernelSelectsAsTheReference) {
  const BackendStatus cuda = cuda_status();
  if (!cuda.available) GTEST_SKIP() << cuda.detail;
  // A V4-Pro CSA layer at 1M tokens: 262144 entries, top-1024.
  const TopkInputs in = make_topk_inputs(4, 262144, 1024, 4, 1 << 20, 0.3, 3);
  for (const TensorCheck& c : compare_topk(in, run_topk_select(in, {Backend::cuda, {}, 1024})))
    EXPECT_TRUE(c.result.pass) << c.result.summary();
}

}  // namespace
}  // namespace tandem
