// The end-to-end model on fuzzed prompts (ids in and out of range, markers, image rows with
// NaN/Inf): both models reject the prompt (BadInput), or the optimized model matches the
// reference tap by tap, and so do up to two decode steps of fuzzed text ids on both models' own
// caches (OptimizedModel, ModelReferenceSequence). Prompts are short (a forward is ~0.1 s in
// double), so this target runs few inputs per second. Empty prompts are left out: appending nothing
// is a no-op for the reference's cache and bad input for the optimized model.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cases/model_case.hpp"
#include "core/error.hpp"
#include "core/vision_config.hpp"
#include "fuzz/fuzz_util.hpp"

namespace {

const tandem::ModelConfig& tiny() {
  static const tandem::ModelConfig m = tandem::builtin_model("tiny");
  return m;
}
const tandem::reference::TinyModelWeights& weights() {
  static const auto w = tandem::reference::tiny_model_weights(tiny());
  return w;
}
const tandem::ModelWeights& optimized_weights() {
  static const auto w = tandem::optimized_model_weights(weights());
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  FuzzedDataProvider in(data, size);
  const int64_t d = tiny().residual.d, V = tiny().engram.vocab;
  ModelPrompt p;
  const int n = in.ConsumeIntegralInRange(1, 8);
  for (int i = 0; i < n; ++i) {
    const int kind = in.ConsumeIntegralInRange(0, 9);  // mostly text, some markers, a few bad ids
    p.ids.push_back(kind < 6   ? in.ConsumeIntegralInRange<int32_t>(0, int32_t(V - 1))
                    : kind < 9 ? in.PickValueInArray({kStart, kImage, kNewline, kEnd})
                               : in.ConsumeIntegral<int32_t>());
  }
  int64_t images = std::count(p.ids.begin(), p.ids.end(), kImage);
  if (in.ConsumeBool()) images += in.ConsumeIntegralInRange(-1, 1);  // a mismatched count
  p.visual = Tensor<double>({std::max<int64_t>(images, 0), d});
  for (double& v : p.visual.data) v = in.ConsumeFloatingPointInRange(-2.0f, 2.0f);
  if (!p.visual.data.empty() && in.ConsumeBool())
    p.visual.data[in.ConsumeIntegralInRange<size_t>(0, p.visual.data.size() - 1)] =
        in.PickValueInArray({NAN, INFINITY, -INFINITY});
  const RunOptions opt = fuzz::emu_options(in);
  auto rejects = [](auto run) {
    try {
      run();
      return false;
    } catch (const BadInput&) {
      return true;
    }
  };
  ModelRun out;
  OptimizedModel model(tiny(), optimized_weights(), opt);
  const bool optimized_rejects =
      rejects([&] { out = append_model(model, optimized_weights(), p, opt); });
  const bool reference_rejects = rejects([&] { run_model_baseline(tiny(), weights(), p); });
  if (optimized_rejects != reference_rejects)
    fuzz::fail(fmt::format("a prompt of {} ids is rejected by the {} model only", p.ids.size(),
                           optimized_rejects ? "optimized" : "reference"));
  if (optimized_rejects) return 0;
  const std::string what = fmt::format("model {} tokens, {} image rows, {} block={}", p.ids.size(),
                                       p.visual.dim(0), opt.schedule.name(), opt.block_threads);
  ModelReferenceSequence ref(tiny(), weights());  // reading the optimized run's records
  fuzz::require_pass(ref.append(p, out), what);
  for (int steps = in.ConsumeIntegralInRange(0, 2); steps > 0; --steps) {
    const ModelPrompt step{
        {in.ConsumeIntegralInRange<int32_t>(0, int32_t(V - 1))}, Tensor<double>({0, d}), {}};
    const int64_t pos = model.length();
    fuzz::require_pass(ref.append(step, model.append(step.ids, Tensor<float>({0, d}))),
                       fmt::format("{}, decode step at position {}", what, pos));
  }
  return 0;
}
