// core/release_config: the built-in releases carry DESIGN 5.6's values, derive 5.5's bytes per
// token, and a malformed release file names its field.
#include <gtest/gtest.h>

#include <functional>

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

// Every layer has an attention kind (DESIGN 5.5): V4.1's 2 window-only layers, r = 2 layers 2..19
// (index sources 2, 8, 14), r = 1 layers 20..39 (20 scores the candidate blocks, 24..36 select
// inside them); V4's window-only, CSA and HCA layers.
TEST(Release, AttentionKindsCoverEveryLayer) {
  for (const std::string& name : builtin_release_names()) {
    const ReleaseConfig r = builtin_release(name);
    int layers = 0;
    for (const AttentionLayers& a : r.attention) layers += a.layers;
    EXPECT_EQ(layers, r.layers) << name;
  }
  const ReleaseConfig v41 = builtin_release("v4.1-flash");
  auto count = [&](int ratio, KvSelection s) {
    int n = 0;
    for (const AttentionLayers& a : v41.attention)
      if (a.ratio == ratio && a.selection == s) n += a.layers;
    return n;
  };
  EXPECT_EQ(count(2, KvSelection::scan), 3);
  EXPECT_EQ(count(2, KvSelection::reuse), 15);
  EXPECT_EQ(count(1, KvSelection::candidates), 1);
  EXPECT_EQ(count(1, KvSelection::in_candidates), 4);
  EXPECT_EQ(count(1, KvSelection::reuse), 15);
  EXPECT_EQ(v41.index_candidate_blocks, 2048);
  EXPECT_EQ(v41.index_candidate_block, 8);
}

// A release file whose attention kinds contradict its caches names the field.
TEST(Release, BadAttentionKindsAreNamed) {
  auto expect_bad = [](const std::function<void(nlohmann::json&)>& edit, const std::string& what) {
    nlohmann::json j = builtin_release_json("v4.1-flash");
    edit(j);
    try {
      parse_release_config(JsonFields(j, "x.json"));
      ADD_FAILURE() << "accepted: " << what;
    } catch (const BadInput& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_bad([](auto& j) { j["attention"][1]["layers"] = 4; }, "'attention': 41 layers");
  expect_bad([](auto& j) { j["attention"][1]["selection"] = "sideways"; }, "attention[1]");
  expect_bad([](auto& j) { j["attention"][0]["selection"] = "scan"; }, "exactly for ratio 0");
  expect_bad([](auto& j) { j["attention"][1]["ratio"] = 3; }, "no kv_caches entry of ratio 3");
  expect_bad([](auto& j) { j["index_candidate_blocks"] = 0; }, "index_candidate_blocks");
  expect_bad([](auto& j) { std::swap(j["attention"][1], j["attention"][2]); },
             "'reuse' before any index source");
  expect_bad([](auto& j) { j["kv_caches"][1]["index_key_bytes"] = 0; }, "needs index keys");
  expect_bad([](auto& j) { std::swap(j["attention"][3], j["attention"][4]); },
             "'in_candidates' before any 'candidates' layer of ratio 1");
  // A vocabulary whose compression map (8 bytes an id) is past the memory budget.
  expect_bad([](auto& j) { j["engram"]["vocab"] = int64_t{1} << 31; }, "engram.vocab");
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

// V4's config.json: the first 3 layers hash-route (V4.1 assumed to keep it); at most every layer.
TEST(Release, HashLayersAreTheFirstThreeAndBounded) {
  for (const std::string& name : builtin_release_names())
    EXPECT_EQ(builtin_release(name).hash_layers, 3) << name;
  nlohmann::json j = builtin_release_json("v4-flash");
  j["num_hash_layers"] = 44;  // 43 layers
  try {
    parse_release_config(JsonFields(j, "r.json"));
    ADD_FAILURE() << "44 hash layers of 43 accepted";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("r.json: field 'num_hash_layers'"), std::string::npos)
        << e.what();
  }
  j.erase("num_hash_layers");  // absent: no layer hashes
  EXPECT_EQ(parse_release_config(JsonFields(j, "r.json")).hash_layers, 0);
}

}  // namespace
}  // namespace tandem
