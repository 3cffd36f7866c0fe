// core/release_config: the built-in releases carry DESIGN 5.6's values, derive 5.5's bytes per
// token, and a malformed release file names its field.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/release_config.hpp"

namespace tandem {
namespace {

TEST(Release, V41FlashAsReleased) {
  const ReleaseConfig r = builtin_release("v4.1-flash");
  EXPECT_EQ(r.hidden, 5120);
  EXPECT_EQ(r.layers, 40);
  EXPECT_EQ(r.draft_layers, 3);
  EXPECT_EQ(r.norm_eps, 1e-20);
  EXPECT_EQ(r.fp8_block, 32);
  EXPECT_EQ(r.routed_experts, 384);
  EXPECT_EQ(r.expert_hidden, 2304);
  EXPECT_EQ(r.kv_bytes_per_token(), 890.0);
  ASSERT_TRUE(r.engram && r.vision);
  EXPECT_EQ(r.engram->layer_ids, (std::vector<int>{1, 14}));
  EXPECT_EQ(r.engram->lookups(), 24);
  EXPECT_EQ(engram_tables(*r.engram).at(0).rows, 384006168);
  EXPECT_EQ(r.vision->min_pixels, 544 * 544);
  EXPECT_EQ(r.vision->max_tokens, 1024);
}

TEST(Release, V4FlashAndProLayerKinds) {
  const ReleaseConfig flash = builtin_release("v4-flash");
  EXPECT_EQ(flash.kv_layers(), 43);  // 2 window-only + 21 CSA + 20 HCA
  EXPECT_EQ(flash.kv_bytes_per_token(), 3514.25);
  EXPECT_EQ(flash.norm_eps, 1e-6);
  EXPECT_FALSE(flash.engram);
  const ReleaseConfig pro = builtin_release("v4-pro");
  EXPECT_EQ(pro.kv_layers(), 61);  // 2 HCA + 29 x (CSA, HCA) + CSA
  EXPECT_EQ(pro.hidden, 7168);
  EXPECT_EQ(pro.route_scale, 2.5);
}

TEST(Release, BadFieldsAreNamed) {
  nlohmann::json j = parse_json(R"({"name": "x"})", "x.json");
  EXPECT_THROW(
      {
        try {
          parse_release_config(JsonFields(j, "x.json"));
        } catch (const BadInput& e) {
          EXPECT_NE(std::string(e.what()).find("x.json: field 'vocab'"), std::string::npos)
              << e.what();
          throw;
        }
      },
      BadInput);
  EXPECT_THROW(builtin_release("v9"), BadInput);
}

}  // namespace
}  // namespace tandem
