// core/json_fields.hpp + core/model_config.hpp: validation errors name the file and field.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/model_config.hpp"

namespace tandem {
namespace {

nlohmann::json tiny_json() {
  return {{"name", "t"},
          {"seed", 1},
          {"residual",
           {{"hc_mult", 4},
            {"d", 64},
            {"sinkhorn_iters", 20},
            {"hc_eps", 1e-6},
            {"norm_eps", 1e-6},
            {"sites", 2},
            {"tokens", 3}}},
          {"engram", to_json(EngramConfig{})},
          {"vision", to_json(VisionConfig{})},
          {"dspark", to_json(DsparkConfig{})},
          {"model", {{"blocks", 16}, {"heads", 2}, {"ffn_hidden", 128}, {"prompt_tokens", 12}}}};
}

// Parsing `j` fails with BadInput whose message contains every string in `parts`.
void expect_bad(const nlohmann::json& j, std::initializer_list<const char*> parts) {
  try {
    parse_model_config(j, "cfg.json");
    FAIL() << "accepted: " << j.dump();
  } catch (const BadInput& e) {
    for (const char* p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, BuiltinTinyParses) {
  const ModelConfig m = builtin_model("tiny");
  EXPECT_EQ(m.name, "tiny");
  EXPECT_EQ(m.residual.hc_mult, 4);
  EXPECT_EQ(m.residual.sinkhorn_iters, 20);
  EXPECT_THROW(builtin_model("huge"), BadInput);
}

TEST(ModelConfig, ValidConfigRoundTrips) {
  const ModelConfig m = parse_model_config(tiny_json(), "cfg.json");
  EXPECT_EQ(m.residual.d, 64);
  EXPECT_EQ(m.residual.tokens, 3);
  EXPECT_EQ(parse_residual_config(JsonFields(to_json(m.residual), "x")).d, 64);
  const nlohmann::json whole = to_json(builtin_model("tiny"));
  EXPECT_EQ(to_json(parse_model_config(whole, "again")), whole);
  EXPECT_EQ(whole["model"]["blocks"], 4);
}

TEST(ModelConfig, ErrorsNameTheField) {
  auto j = tiny_json();
  j["residual"].erase("d");
  expect_bad(j, {"cfg.json", "residual.d", "missing"});
  j = tiny_json();
  j["residual"]["d"] = -3;
  expect_bad(j, {"residual.d", "-3"});
  j = tiny_json();
  j["residual"]["d"] = 12;
  expect_bad(j, {"residual.d", "multiple of 8"});
  j = tiny_json();
  j["residual"]["hc_eps"] = "small";
  expect_bad(j, {"residual.hc_eps", "number"});
  j = tiny_json();
  j["residual"]["hc_mult"] = 8;
  expect_bad(j, {"residual.hc_mult"});
  j = tiny_json();
  j["residual"]["sinkhorn_itres"] = 20;
  expect_bad(j, {"residual.sinkhorn_itres", "unknown"});
  j = tiny_json();
  j["seed"] = -1;
  expect_bad(j, {"seed"});
  j = tiny_json();
  j["engram"]["seed"] = UINT64_MAX - 10007;  // + 10007 x layer 14 would wrap
  expect_bad(j, {"engram.seed", "exceeds 2^64 - 1"});
  j = tiny_json();
  j["dspark"]["gamma"] = 9;  // more than one verification pass checks
  expect_bad(j, {"dspark.gamma", "9"});
  j = tiny_json();
  j["dspark"]["backbone_layers"] = 2;  // target features read the last three layers
  expect_bad(j, {"dspark.backbone_layers"});
  j = tiny_json();
  j["model"]["heads"] = 3;  // 64 streams wide: 3 heads do not divide it
  expect_bad(j, {"model.heads", "residual.d"});
  j = tiny_json();
  j["model"]["blocks"] = 8;  // Engram's default layer 14 is past the last block
  expect_bad(j, {"engram.layer_ids", "14"});
  j = tiny_json();
  j["engram"]["heads"] = 9;
  expect_bad(j, {"engram.heads"});
  j = tiny_json();
  j["engram"]["multipliers"] = {{2, 3, 5, 7}, {1, 3, 5, 7}};
  expect_bad(j, {"engram.multipliers", "odd"});
  expect_bad(nlohmann::json::array(), {"cfg.json", "object"});
}

TEST(ModelConfig, ImageSizingDefaultsToTheReleaseAndIsChecked) {
  auto j = tiny_json();
  for (const char* k : {"min_pixels", "max_tokens", "max_wh_ratio"}) j["vision"].erase(k);
  const ImageSizing s = parse_model_config(j, "cfg.json").vision.sizing;
  EXPECT_EQ(s.min_pixels, 544 * 544);
  EXPECT_EQ(s.max_tokens, 1024);
  EXPECT_EQ(s.max_wh_ratio, 0);  // unset
  j["vision"]["max_wh_ratio"] = 8, j["vision"]["min_pixels"] = 1000, j["vision"]["max_tokens"] = 64;
  const VisionConfig v = parse_model_config(j, "cfg.json").vision;
  EXPECT_EQ(v.sizing.max_wh_ratio, 8);
  EXPECT_EQ(parse_vision_config(JsonFields(to_json(v), "x")).sizing.min_pixels, 1000);
  const std::pair<const char*, nlohmann::json> bad[] = {
      {"min_pixels", -1},      {"min_pixels", 1.5},
      {"max_tokens", 3},       {"max_tokens", (1 << 16) + 1},
      {"max_wh_ratio", 0.5},   {"max_wh_ratio", -2},
      {"max_wh_ratio", "wide"}};
  for (const auto& [key, value] : bad) {
    j = tiny_json();
    j["vision"][key] = value;
    expect_bad(j, {"cfg.json", (std::string("vision.") + key).c_str()});
  }
}

TEST(ModelConfig, InvalidJsonNamesTheFile) {
  try {
    parse_json("{\"name\": ", "broken.json");
    FAIL();
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("broken.json"), std::string::npos);
  }
  EXPECT_THROW(load_model_config("/nonexistent/cfg.json"), BadInput);
}

}  // namespace
}  // namespace tandem
