// The end-to-end model on fuzzed prompts (ids in and out of range, markers, image rows with
// NaN/Inf): both models reject the prompt (BadInput), or the optimized model matches the
// reference tap by tap. Prompts are short (a forward is ~0.1 s in double), so this target runs
// few inputs per second. Empty prompts are left out: appending nothing is a no-op for the
// reference's cache and bad input for a one-prompt run.
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
  ModelReference ref;
  const bool optimized_rejects =
      rejects([&] { out = run_model(tiny(), optimized_weights(), p, opt); });
  const bool reference_rejects = rejects([&] { ref = run_model_reference(tiny(), weights(), p); });
  if (optimized_rejects != reference_rejects)
    fuzz::fail(fmt::format("a prompt of {} ids is rejected by the {} model only", p.ids.size(),
                           optimized_rejects ? "optimized" : "reference"));
  if (optimized_rejects) return 0;
  ref = run_model_reference(tiny(), weights(), p, &out);  // reading the optimized run's records
  fuzz::require_pass(check_model(tiny(), weights(), p, ref, out),
                     fmt::format("model {} tokens, {} image rows, {} block={}", p.ids.size(),
                                 p.visual.dim(0), opt.schedule.name(), opt.block_threads));
  return 0;
}
