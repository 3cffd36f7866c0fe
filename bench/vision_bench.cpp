// Vision kernels (3x3 unshuffle + inverse, 2D RoPE, biased top-k MoE gate) on one image:
// optimized (emu always; cuda with a GPU) against the reference.
#include <benchmark/benchmark.h>

#include "cases/vision_case.hpp"

namespace tandem {
namespace {

// Args: image width, height, bf16?
VisionCase bench_case(const benchmark::State& st) {
  VisionCase c;
  c.image_w = static_cast<int>(st.range(0)), c.image_h = static_cast<int>(st.range(1));
  c.act = st.range(2) ? ActDType::bf16 : ActDType::f32;
  c.seed = 1;
  return c;
}

void BM_VisionKernels(benchmark::State& st, Backend backend) {
  if (backend == Backend::cuda && !cuda_status().available) {
    st.SkipWithError(cuda_status().detail.c_str());
    return;
  }
  const VisionCase c = bench_case(st);
  const VisionInputs in = make_vision_inputs(c);
  for (auto _ : st) benchmark::DoNotOptimize(run_vision(in, c.act, {backend, {}, 128}));
  st.SetLabel(fmt::format("{}x{} {} -> {} tokens", c.image_w, c.image_h, act_dtype_name(c.act),
                          in.geometry.visual_tokens()));
}

void BM_VisionReference(benchmark::State& st) {
  const VisionCase c = bench_case(st);
  const VisionInputs in = make_vision_inputs(c);
  for (auto _ : st) {
    benchmark::DoNotOptimize(reference::unshuffle(in.grid));
    benchmark::DoNotOptimize(reference::rope_2d<double>(in.rope));
    benchmark::DoNotOptimize(reference::moe_gate<double>(in.gate));
  }
}

BENCHMARK_CAPTURE(BM_VisionKernels, emu, Backend::emu)
    ->Args({640, 480, 0})
    ->Args({640, 480, 1})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_VisionKernels, cuda, Backend::cuda)
    ->Args({1920, 1080, 1})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_VisionReference)->Args({640, 480, 0})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
