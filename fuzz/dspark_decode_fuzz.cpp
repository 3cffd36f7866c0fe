// Scheduled DSpark batches with fuzzed requests, drafters, admissions and steps-per-second
// curves, decoded twice: verified by the reference and by the kernel under the emulator. Both
// reject the batch (BadInput: prompts or drafts out of range, too many drafts, confidences that
// do not match, curves too short, admission counts outside the proposals) or give the same texts
// and acceptances, every cache holding exactly its text (without the newest token) and every
// pass emitting accepted + 1 tokens except at the length limit.
#include <fmt/format.h>

#include <memory>

#include "cases/dspark_case.hpp"
#include "core/error.hpp"
#include "core/philox.hpp"
#include "fuzz/fuzz_util.hpp"
#include "reference/backbone.hpp"
#include "reference/dspark.hpp"
#include "reference/model_util.hpp"

namespace {

using namespace tandem;

// What the fuzzer chose; the drafter's proposals are Philox draws keyed by (seed, request,
// text length), so both decodes see the same drafts for the same text.
struct Plan {
  int64_t vocab = 2;
  int requests = 1, steps = 0, budget = 5, admission = 0;
  uint64_t seed = 0;
  bool greedy = false, wild = false;  // wild: drafts may be malformed
  std::vector<std::vector<int32_t>> prompts;
  std::vector<double> sps;
};

reference::Proposal draft(const Plan& plan, uint32_t request, size_t length, int K) {
  auto word = [&](uint32_t i) {
    return philox_draw(plan.seed, request, uint32_t(length) * 64 + i);
  };
  const Philox4 head = word(0);
  int n = 1 + int(head.v[0] % uint32_t(K));
  if (plan.wild && head.v[1] % 8 == 0) n = int(head.v[1] / 8 % uint32_t(K + 2));  // 0..K+1
  reference::Proposal p;
  for (int k = 0; k < n; ++k) {
    const Philox4 w = word(1 + uint32_t(k));
    const bool bad = plan.wild && w.v[3] % 16 == 0;
    p.tokens.push_back(bad ? int32_t(plan.vocab) : int32_t(w.v[0] % uint32_t(plan.vocab)));
    p.p_draft.emplace_back(plan.vocab, 0.0f);
    float sum = 0;
    for (int64_t v = 0; v < plan.vocab; ++v) sum += p.p_draft[k][v] = float(1 + (w.v[1] + v) % 4);
    for (float& x : p.p_draft[k]) x /= sum;
    p.confidence.push_back(philox_uniform(w.v[2]));
  }
  if (plan.wild && head.v[2] % 8 == 0 && n > 0) p.confidence.pop_back();  // one confidence short
  return p;
}

reference::Admission admission(const Plan& plan) {
  switch (plan.admission) {
    case 0:
      return reference::admit_all;
    case 1:
      return reference::scheduler_admission(plan.sps);
    default:  // counts drawn per pass, possibly beyond the proposals
      return [&plan](const std::vector<reference::Proposal>& proposals) {
        std::vector<int> counts;
        for (const auto& p : proposals) {
          const uint32_t w = philox_draw(plan.seed, 99, uint32_t(p.tokens.size())).v[0];
          counts.push_back(int(w % uint32_t(p.tokens.size() + (plan.wild ? 2 : 1))));
        }
        return counts;
      };
  }
}

struct Outcome {
  bool rejected = false;
  reference::BatchDecode decode;
  std::vector<Eigen::MatrixXd> caches;
};

Outcome decode(const Plan& plan, const reference::Verifier& verify) {
  std::vector<std::unique_ptr<reference::TinyBackbone>> models;
  std::vector<reference::BatchRequest> batch;
  for (int r = 0; r < plan.requests; ++r) {
    models.push_back(std::make_unique<reference::TinyBackbone>(plan.vocab, 8, plan.seed));
    batch.push_back(
        {models.back().get(), plan.prompts[r], [&plan, r](const std::vector<int32_t>& text, int K) {
           return draft(plan, uint32_t(r), text.size(), K);
         }});
  }
  Outcome out;
  try {
    out.decode = reference::speculative_batch_decode(
        batch, plan.steps, [&](int) { return plan.budget; }, admission(plan),
        {plan.seed, 1.0, plan.greedy}, verify);
  } catch (const BadInput&) {
    out.rejected = true;
    return out;
  }
  for (const auto& m : models) out.caches.push_back(m->cache_snapshot());
  return out;
}

void check(const Plan& plan, const Outcome& o) {
  for (int r = 0; r < plan.requests; ++r) {
    const std::vector<int32_t>& text = o.decode.text[r];
    const size_t goal = plan.prompts[r].size() + plan.steps;
    if (text.size() != goal)
      fuzz::fail(fmt::format("request {}: {} tokens, not {}", r, text.size(), goal));
    reference::TinyBackbone plain(plan.vocab, 8, plan.seed);
    plain.append({text.begin(), text.end() - 1});
    if (!reference::identical(o.caches[r], plain.cache_snapshot()))
      fuzz::fail(fmt::format("request {}: the cache is not its text's", r));
    if (!pass_counts_hold(o.decode.stats[r], plan.budget, true))
      fuzz::fail(
          fmt::format("request {}: a pass broke accepted <= admitted <= budget or emitted "
                      "== accepted + 1",
                      r));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  Plan plan;
  plan.vocab = in.ConsumeIntegralInRange<int64_t>(1, 40);
  plan.requests = in.ConsumeIntegralInRange(1, 4);
  plan.steps = in.ConsumeIntegralInRange(0, 10);
  plan.budget = in.ConsumeIntegralInRange(1, kDsparkMaxDraft);
  plan.admission = in.ConsumeIntegralInRange(0, 2);
  plan.seed = in.ConsumeIntegral<uint64_t>();
  plan.greedy = in.ConsumeBool();
  plan.wild = in.ConsumeBool();
  for (int r = 0; r < plan.requests; ++r) {
    std::vector<int32_t> prompt(in.ConsumeIntegralInRange(plan.wild ? 0 : 1, 5));
    for (int32_t& t : prompt)
      t = in.ConsumeIntegralInRange<int32_t>(plan.wild ? -1 : 0, int32_t(plan.vocab - 1));
    plan.prompts.push_back(prompt);
  }
  const size_t points = in.ConsumeIntegralInRange<size_t>(plan.wild ? 0 : 6 * 4 + 1, 6 * 4 + 8);
  for (size_t i = 0; i < points; ++i) plan.sps.push_back(in.ConsumeFloatingPointInRange(0.1, 10.0));
  const RunOptions opt = fuzz::emu_options(in);
  const Outcome want = decode(plan, reference::dspark_verify);
  const Outcome got =
      decode(plan, [&](const VerifyInputs& v) { return run_dspark_verify(v, opt); });
  if (want.rejected != got.rejected)
    fuzz::fail(fmt::format("the batch is rejected with {} verification only",
                           want.rejected ? "reference" : "kernel"));
  if (want.rejected) return 0;
  if (got.decode.text != want.decode.text)
    fuzz::fail("kernel and reference verification decode different texts (" + opt.schedule.name() +
               ")");
  for (int r = 0; r < plan.requests; ++r)
    if (got.decode.stats[r].accepted_per_step != want.decode.stats[r].accepted_per_step)
      fuzz::fail(fmt::format("request {}: acceptances differ", r));
  check(plan, want);
  return 0;
}
