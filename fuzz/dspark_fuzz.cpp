// Differential: DSpark verification, kernel under the emulator against the reference, for
// fuzzed distributions (zeros, ties, sums far from 1), drafted tokens, budgets (per request in
// a scheduled batch), ids and draws: decisions must be bit-identical. Tokens out of range or
// probabilities outside [0, 1] are BadInput.
#include "core/error.hpp"
#include "fuzz/fuzz_util.hpp"
#include "optimized/dspark.hpp"
#include "reference/dspark.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  FuzzedDataProvider in(data, size);
  VerifyInputs v;
  v.requests = in.ConsumeIntegralInRange(1, 6);
  v.budget = in.ConsumeIntegralInRange(1, kDsparkMaxDraft);
  v.vocab = in.ConsumeIntegralInRange(1, 300);
  v.greedy = in.ConsumeBool();
  v.seed = in.ConsumeIntegral<uint64_t>();
  const RunOptions opt = fuzz::emu_options(in);
  const int64_t R = v.requests, K = v.budget, V = v.vocab;
  v.draft = Tensor<int32_t>({R, K});
  v.p_draft = Tensor<float>({R, K, V});
  v.p_target = Tensor<float>({R, K + 1, V});
  for (int64_t r = 0; r < R; ++r) v.position.push_back(in.ConsumeIntegral<uint32_t>());
  if (in.ConsumeBool())  // a scheduled batch: per-request draft counts and draw ids
    for (int64_t r = 0; r < R; ++r) {
      v.drafted.push_back(in.ConsumeIntegralInRange<int32_t>(0, int32_t(K)));
      v.request.push_back(in.ConsumeIntegral<uint32_t>());
    }
  for (int32_t& x : v.draft.data) x = in.ConsumeIntegralInRange<int32_t>(0, int32_t(V - 1));
  // Quantised probabilities: ties and exact zeros are common, as in real top-p distributions.
  for (Tensor<float>* p : {&v.p_draft, &v.p_target})
    for (float& x : p->data) x = in.ConsumeIntegralInRange(0, 16) / 16.0f;
  const VerifyOutputs got = run_dspark_verify(v, opt);
  const VerifyOutputs want = reference::dspark_verify(v);
  if (got.accepted != want.accepted || got.emitted.data != want.emitted.data)
    fuzz::fail("dspark verify: kernel decisions differ from the reference (" + opt.schedule.name() +
               ")");
  return 0;
}
