// Specificity (issue 17): correct kernels pass every valid config. Each case draws a model
// config with every section's sizes and scalars inside the ranges the config parser documents,
// extremes included (1 Sinkhorn iteration, 1 site, 1 token, a 1x1 image, one head, top-k = all
// experts, d = 8, eps at 0 and at its range's top, temperatures at 1e-3 and 1e3), and runs every
// `tandem verify` row on it with the unmodified kernels under the emulator. Sizes stay small
// (the emulator runs every thread), the values they take do not.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <nlohmann/json.hpp>

#include "app/verify.hpp"
#include "core/model_config.hpp"
#include "reference/vision.hpp"

namespace tandem {
namespace {

template <class T>
T pick(std::initializer_list<T> values) {
  return *rc::gen::elementOf(std::vector<T>(values));
}

int in_range(int lo, int hi) { return *rc::gen::inRange(lo, hi + 1); }

nlohmann::json draw_residual(int d) {
  return {{"hc_mult", 4},
          {"d", d},
          {"sinkhorn_iters", pick({1, 2, 20})},
          {"hc_eps", pick({0.0, 1e-6, 1e-2})},
          {"norm_eps", pick({0.0, 1e-20, 1e-6, 1e-2})},
          {"sites", in_range(1, 4)},
          {"tokens", in_range(1, 8)}};
}

nlohmann::json draw_engram(int d, int blocks) {
  std::vector<int> layers;
  for (int b = 0; b < blocks; ++b)
    if (*rc::gen::arbitrary<bool>()) layers.push_back(b);
  if (layers.empty()) layers.push_back(in_range(0, blocks - 1));  // the parser wants one
  const int64_t vocab = pick<int64_t>({64, 4096});
  return {{"layer_ids", layers},
          {"max_order", in_range(2, 4)},
          {"heads", pick({1, 2, 8})},
          {"head_dim", 256},
          {"table_base", pick<int64_t>({2, 1000})},
          {"vocab", vocab},
          {"compressed_vocab", pick<int64_t>({3, 61, 3001})},
          {"pad_id", pick<int64_t>({0, 2, vocab - 1})},
          {"seed", *rc::gen::arbitrary<uint32_t>()},
          {"d", d},
          {"norm_eps", pick({0.0, 1e-20, 1e-6, 1e-2})},
          {"tokens", in_range(1, 16)},
          {"wkv_fp8_block", pick({0, 32, 128})},
          {"skip_marker_lookups", *rc::gen::arbitrary<bool>()}};
}

nlohmann::json draw_vision() {
  const int experts = pick({1, 6, 64});
  return {{"image_w", pick({1, 3, 40, 100})},
          {"image_h", pick({1, 2, 30, 77})},
          {"width", pick({8, 16, 32})},
          {"heads", in_range(1, 3)},
          {"head_dim", pick({4, 16, 32})},
          {"experts", experts},
          {"top_k", *rc::gen::inRange(1, std::min(16, experts) + 1)},
          {"text_tokens", in_range(0, 8)},
          {"min_pixels", pick<int64_t>({0, 196, 3000})},
          {"max_tokens", pick({4, 9, 16})},
          {"max_wh_ratio", pick({0.0, 1.0, 3.5})}};
}

nlohmann::json draw_dspark() {
  return {{"vocab", pick({2, 17, 257})},     {"backbone_width", pick({1, 8, 16})},
          {"backbone_layers", pick({3, 4})}, {"width", pick({1, 8, 32})},
          {"blocks", in_range(1, 3)},        {"window", pick({1, 7, 128})},
          {"gamma", in_range(1, 5)},         {"markov_rank", pick({1, 8})},
          {"requests", pick({1, 3, 8})},     {"temperature", pick({1e-3, 0.7, 1.0, 1e3})}};
}

nlohmann::json draw_config() {
  const int d = pick({8, 16, 24, 64});
  const int blocks = pick({3, 4});
  int heads = pick({1, 2, 4, 8});
  while (d % heads) heads /= 2;
  return {{"name", "generated"},
          {"seed", *rc::gen::arbitrary<uint32_t>()},
          {"residual", draw_residual(d)},
          {"engram", draw_engram(d, blocks)},
          {"vision", draw_vision()},
          {"dspark", draw_dspark()},
          {"model",
           {{"blocks", blocks},
            {"heads", heads},
            {"ffn_hidden", pick({4, 12, 32})},
            {"prompt_tokens", pick({1, 2, 6})}}}};
}

RC_GTEST_PROP(Specificity, EveryVerifyRowPassesEveryValidConfig, ()) {
  const nlohmann::json j = draw_config();
  RC_LOG() << j.dump() << "\n";
  const ModelConfig m = parse_model_config(j, "generated");  // valid by construction
  // An image the release's PIL refuses to resize (a side of its content rounds to 0 px, e.g.
  // 100x1 px with max_wh_ratio 1) is bad input (exit 2, app_props), not a kernel's false alarm.
  const auto g = reference::vision_geometry(m.vision.image_w, m.vision.image_h, m.vision.sizing);
  RC_PRE(g.content_w >= 1 && g.content_h >= 1);
  RunOptions opt;
  opt.block_threads = pick({32, 64, 128});  // the kernels' own properties sweep 32..256
  for (const app::VerifyRow& row : app::verify_model(m, opt, false)) {
    RC_LOG() << row.component << " / " << row.name << ": " << (row.pass ? "PASS " : "FAIL ")
             << row.worst_tensor << " margin " << row.margin << " " << row.detail << "\n";
    RC_ASSERT(row.pass);
  }
}

}  // namespace
}  // namespace tandem
