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
          {"model",
           {{"blocks", 16},
            {"heads", 4},
            {"ffn_hidden", 128},
            {"prompt_tokens", 12},
            // V4.1's mix in miniature: window-only, r = 2 (two sources), r = 1 (one source, a
            // second index source reading its cache)
            {"compress_ratios", {0, 0, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1}},
            {"kv_source_layers", {2, 5, 9}},
            {"index_source_layers", {2, 5, 9, 12}},
            {"window_size", 128},
            {"index_n_heads", 32},
            {"index_topk", 512}}}};
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

// A section is validated when it is read: a release-size section beside one no component can
// run is read on its own; read with every section, the bad one is refused; a section asked for
// and absent names itself; the built-in v4.1-flash config holds the release's widths.
TEST(ModelConfig, SectionsAreValidatedWhenRead) {
  nlohmann::json j = tiny_json();
  j["residual"]["d"] = 5120;
  j["vision"]["image_w"] = 1 << 20, j["vision"]["image_h"] = 1 << 20;  // past the budget
  const ModelConfig alone = parse_model_config(j, "cfg.json", {"residual"});
  EXPECT_EQ(alone.residual.d, 5120);
  EXPECT_EQ(alone.sections, std::vector<std::string>{"residual"});
  EXPECT_TRUE(alone.has("residual"));
  EXPECT_FALSE(alone.has("vision"));
  EXPECT_EQ(parse_model_config(to_json(alone), "x", {"residual"}).residual.d, 5120);
  expect_bad(j, {"vision.image_w x image_h"});
  j.erase("engram");
  EXPECT_EQ(model_sections_of(j),
            (std::vector<std::string>{"residual", "vision", "dspark", "model"}));
  try {
    parse_model_config(j, "cfg.json", {"engram"});
    FAIL() << "an absent section was read";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("engram"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_model_config(j, "cfg.json", {"kv"}), BadInput);
  // Every section but the end-to-end model's joint reading (below) at the release's widths.
  const ModelConfig v41 = builtin_model("v4.1-flash", {"residual", "engram", "dspark", "model"});
  EXPECT_EQ(v41.residual.d, 5120);
  EXPECT_EQ(v41.engram.d, 5120);
  EXPECT_EQ(v41.engram.lookups(), 24);
  EXPECT_EQ(v41.shape.heads, 64);
  EXPECT_EQ(v41.shape.index_heads, 32);
  EXPECT_EQ(v41.shape.index_topk, 512);
  EXPECT_EQ(v41.dspark.vocab, 129280);  // the whole vocabulary, its noise id and 64 heads
  EXPECT_EQ(v41.dspark.noise_id, 128799);
  EXPECT_EQ(v41.dspark.heads, 64);
  // Its drafter at the release's widths; the decode rows' trained drafter at the decode sizes.
  EXPECT_EQ(v41.dspark.width, 5120);
  EXPECT_EQ(v41.dspark.backbone_width, 5120);
  EXPECT_EQ(v41.dspark.markov_rank, 256);
  EXPECT_EQ(v41.dspark.lora.q_rank, 1280);
  EXPECT_EQ(v41.dspark.lora.o_rank, 1024);
  const DsparkConfig decode = dspark_decode_config(v41.dspark);
  EXPECT_EQ(decode.width, 64);
  EXPECT_EQ(decode.backbone_width, 64);
  EXPECT_EQ(decode.markov_rank, 8);
  EXPECT_EQ(decode.lora.q_rank, 64);
  EXPECT_EQ(decode.vocab, 129280);  // the rest is the section's
  EXPECT_EQ(decode.experts, 128);
  EXPECT_FALSE(decode.decode);
  const ModelConfig v41_moe = builtin_model("v4.1-flash", {"residual", "model", "vision"});
  EXPECT_EQ(v41_moe.vision.width, 1024);
  EXPECT_EQ(v41_moe.vision.experts, 384);
  EXPECT_EQ(v41_moe.vision.top_k, 6);
  EXPECT_EQ(v41_moe.shape.ffn_hidden, 2304);
  // Every section: the end-to-end model at the release's widths, its 4 blocks standing for layers
  // 0, 1, 2 and 14 (Engram's 1 and 14 among them), a text prompt (the release's image is 968
  // positions).
  const ModelConfig whole = builtin_model("v4.1-flash");
  EXPECT_EQ(whole.shape.layers, (std::vector<int>{0, 1, 2, 14}));
  EXPECT_EQ(whole.shape.block_of_layer(14), 3);
  EXPECT_FALSE(whole.shape.prompt_image);
  EXPECT_EQ(whole.engram.vocab, 129280);
  nlohmann::json with_image = builtin_model_json("v4.1-flash");
  with_image["model"]["prompt_image"] = true;
  EXPECT_EQ(verification_prompt_tokens(
                parse_model_config(with_image, "x", {"residual", "vision", "model"})),
            2 + 968);  // 23 rows of 41 visual tokens, each with its NEWLINE, START and END
  // The output projection stages a token's heads x 512 inputs, past the default 48 KiB up to what
  // sm_90 grants a block: 116 heads exceed it, refused when every section is read.
  nlohmann::json all = tiny_json();
  all["model"]["heads"] = 116;
  expect_bad(all, {"model.heads", "output projection"});
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
  // The drafter's rows dense_rows stages in sm_90's 227 KiB (58112 floats): wo's heads x 512 and
  // main_proj's 3 x backbone width, at most 112 heads and a width of 19368.
  j = tiny_json();
  j["dspark"]["heads"] = 116;
  expect_bad(j, {"dspark.heads", "112"});
  j = tiny_json();
  j["dspark"]["backbone_width"] = 19372;
  expect_bad(j, {"dspark.backbone_width", "19368"});
  // The decode sizes are checked as the section's own, their errors named inside "decode".
  j = tiny_json();
  j["dspark"]["decode"] = {{"width", 12}, {"backbone_width", 16}, {"markov_rank", 4}};
  expect_bad(j, {"dspark.decode.width", "multiple of 8"});
  j["dspark"]["decode"] = {{"width", 16}, {"backbone_width", 16}};
  expect_bad(j, {"dspark.decode.markov_rank", "missing"});
  j["dspark"]["decode"] = {{"width", 16}, {"backbone_width", 16}, {"markov_rank", 4}, {"vocab", 9}};
  expect_bad(j, {"dspark.decode.vocab", "unknown"});
  j["dspark"]["decode"] = {{"width", 16}, {"backbone_width", 16}, {"markov_rank", 4}};
  const ModelConfig with_decode = parse_model_config(j, "cfg.json");
  ASSERT_TRUE(with_decode.dspark.decode);
  EXPECT_EQ(dspark_decode_config(with_decode.dspark).width, 16);
  // Written back as read.
  EXPECT_EQ(parse_model_config(to_json(with_decode), "cfg.json").dspark.decode->markov_rank, 4);
  j = tiny_json();
  j["model"]["heads"] = 12;  // 64 streams wide: 12 heads do not divide it (the attention row)
  expect_bad(j, {"model.heads", "residual.d"});
  j = tiny_json();
  j["model"]["heads"] = 6;  // sparse attention runs heads in groups of 4
  expect_bad(j, {"model.heads", "multiple of 4"});
  j = tiny_json();
  j["model"]["blocks"] = 8;  // Engram's default layer 14 is past the last block
  j["model"]["compress_ratios"] = {0, 0, 2, 2, 2, 2, 2, 2};
  j["model"]["kv_source_layers"] = {2, 5};
  j["model"]["index_source_layers"] = {2, 5};
  expect_bad(j, {"engram.layer_ids", "14"});
  j = tiny_json();
  j["engram"]["heads"] = 9;
  expect_bad(j, {"engram.heads"});
  j = tiny_json();
  j["engram"]["multipliers"] = {{2, 3, 5, 7}, {1, 3, 5, 7}};
  expect_bad(j, {"engram.multipliers", "odd"});
  // Sizes each field allows whose memory is past the budget: the compression map of 2^31 ids
  // (17 GB), a layer's Wkv at d 10248 (5.3 GB measured) beside 2^18 tokens' rows.
  j = tiny_json();
  j["engram"]["vocab"] = int64_t{1} << 31;
  expect_bad(j, {"engram.vocab", "17.2 GB"});
  j = tiny_json();
  j["engram"]["d"] = 10248, j["engram"]["tokens"] = 1 << 18;
  expect_bad(j, {"engram.tokens x layer_ids x heads x d", "GB"});
  // The dense rows' W [3d, d] at d 12288 (5.4 GB measured) fit the 8 GiB budget; 20 tokens
  // through them imply 7.2e10 multiply-adds. The residual's [d, d] sublayer stand-ins of 1024 sites
  // at d 4096 (206 GB).
  j = tiny_json();
  j["residual"]["d"] = 12288, j["residual"]["tokens"] = 20;
  try {  // the dense rows' sections (with every section, Engram's width is refused first)
    parse_model_config(j, "cfg.json", {"residual", "model"});
    ADD_FAILURE() << "accepted dense rows at d 12288";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("residual.d x model.ffn_hidden (the dense rows)"),
              std::string::npos)
        << e.what();
  }
  j = tiny_json();
  j["residual"]["d"] = 4096, j["residual"]["sites"] = 1024;
  expect_bad(j, {"residual.tokens x sites x d", "GB"});
  expect_bad(nlohmann::json::array(), {"cfg.json", "object"});
}

// The name is printed by verify's heading and written into reports: control characters (an ESC
// sequence could drive the terminal; C1's CSI as UTF-8 too) are refused, and the error message
// shows them escaped.
TEST(ModelConfig, NamesWithControlCharactersAreRefusedAndShownEscaped) {
  for (const std::string& name : {std::string("t\x1b[2J"), std::string("a\0b", 3),
                                  std::string("t\xc2\x9b"
                                              "31m"),
                                  std::string("")}) {
    auto j = tiny_json();
    j["name"] = name;
    try {
      parse_model_config(j, "cfg.json");
      ADD_FAILURE() << "accepted the name " << j["name"].dump();
    } catch (const BadInput& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("cfg.json: field 'name'"), std::string::npos) << m;
      for (const char c : m) EXPECT_TRUE(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) << m;
      EXPECT_EQ(m.find("\xc2\x9b"), std::string::npos) << m;
    }
  }
  auto j = tiny_json();
  j["name"] = "v4.1-flash (mine, \xc3\xa9t\xc3\xa9)";  // printable UTF-8 is a name
  EXPECT_EQ(parse_model_config(j, "cfg.json").name, j["name"].get<std::string>());
}

// The KV cache's layer mix (core/model_shape.hpp): every block reads a cache of its ratio and a
// selection over that cache.
TEST(ModelConfig, LayerMixErrorsNameTheField) {
  auto mix = [](auto edit) {
    auto j = tiny_json();
    edit(j["model"]);
    return j;
  };
  expect_bad(mix([](auto& m) { m["compress_ratios"].erase(0); }),
             {"model.compress_ratios", "15 ratios for 16 blocks"});
  expect_bad(mix([](auto& m) { m["compress_ratios"][3] = 4; }),
             {"model.compress_ratios", "[0, 2]"});
  expect_bad(mix([](auto& m) {
               m["kv_source_layers"] = {0, 2, 5, 9};
             }),
             {"model.kv_source_layers", "window-only"});
  expect_bad(mix([](auto& m) {
               m["kv_source_layers"] = {5, 2, 9};
             }),
             {"model.kv_source_layers", "ascending"});
  expect_bad(mix([](auto& m) {
               m["kv_source_layers"] = {5, 9};
             }),  // blocks 2..4 read none
             {"model.kv_source_layers", "block 2"});
  expect_bad(mix([](auto& m) {
               m["kv_source_layers"] = {2, 5};
             }),  // block 9 (r = 1) reads 5's
             {"model.compress_ratios", "block 9", "block 5"});
  expect_bad(mix([](auto& m) {
               m["index_source_layers"] = {2, 9};
             }),  // 5's cache: 2's selection
             {"model.index_source_layers", "block 5"});
  expect_bad(mix([](auto& m) { m["kv_source_layers"] = {2, 5, 16}; }), {"model.kv_source_layers"});
  expect_bad(mix([](auto& m) { m["heads"] = 116; }), {"model.heads", "59392 inputs", "58112"});
  expect_bad(mix([](auto& m) { m["index_n_heads"] = 65; }), {"model.index_n_heads"});
  auto many_queries = tiny_json();  // within every other row's budget, not the queries' RoPE's
  many_queries["residual"]["d"] = 32, many_queries["residual"]["sites"] = 1;
  many_queries["residual"]["tokens"] = 9000, many_queries["engram"]["d"] = 32;
  many_queries["model"]["heads"] = 32, many_queries["model"]["ffn_hidden"] = 4;
  many_queries["model"]["blocks"] = 4, many_queries["engram"]["layer_ids"] = {1};
  many_queries["model"]["compress_ratios"] = {0, 2, 2, 1};
  many_queries["model"]["kv_source_layers"] = many_queries["model"]["index_source_layers"] = {1, 3};
  expect_bad(many_queries, {"residual.tokens x model.heads"});
  expect_bad(mix([](auto& m) { m["index_topk"] = 0; }), {"model.index_topk"});
  expect_bad(mix([](auto& m) { m["window_size"] = 0; }), {"model.window_size"});
  expect_bad(mix([](auto& m) { m.erase("index_source_layers"); }),
             {"model.index_source_layers", "missing"});
  const ModelShape s = parse_model_config(tiny_json(), "cfg.json").shape;
  EXPECT_EQ(s.kv_source(0), 0);  // window-only: its own window
  EXPECT_EQ(s.kv_source(4), 2);  // a consumer
  EXPECT_EQ(s.kv_source(15), 9);
  EXPECT_EQ(s.index_source(4), 2);
  EXPECT_EQ(s.index_source(13), 12);  // an index source that is no kv source
  EXPECT_EQ(s.index_source(1), -1);
}

// The attention's LoRAs (q_lora_rank, o_groups, o_lora_rank) in the model's and DSpark's
// sections: the defaults where absent, the release's in v4.1-flash, read back from to_json, and
// each limit named where it bites.
TEST(ModelConfig, AttentionLorasAreReadCheckedAndWritten) {
  const ModelConfig plain = parse_model_config(tiny_json(), "cfg.json");
  EXPECT_EQ(plain.shape.lora.q_rank, AttentionLora{}.q_rank);
  EXPECT_EQ(plain.dspark.lora.o_groups, AttentionLora{}.o_groups);
  const ModelConfig v41 = builtin_model("v4.1-flash");
  EXPECT_EQ(v41.shape.lora.q_rank, 1280);  // DESIGN 5.6
  EXPECT_EQ(v41.shape.lora.o_groups, 8);
  EXPECT_EQ(v41.shape.lora.o_rank, 1024);
  EXPECT_EQ(to_json(parse_model_config(to_json(v41), "again")), to_json(v41));
  for (const char* section : {"model", "dspark"}) {
    auto with = [&](const char* key, int value) {
      auto j = tiny_json();
      j[section][key] = value;
      return j;
    };
    const std::string where = std::string(section) + ".";
    const ModelConfig set = parse_model_config(with("o_lora_rank", 48), "cfg.json");
    EXPECT_EQ((std::string(section) == "model" ? set.shape.lora : set.dspark.lora).o_rank, 48);
    expect_bad(with("q_lora_rank", 12), {(where + "q_lora_rank").c_str(), "multiple of 8"});
    expect_bad(with("q_lora_rank", 0), {(where + "q_lora_rank").c_str()});
    expect_bad(with("o_groups", 3), {(where + "o_groups").c_str(), "do not divide the 4 heads"});
    expect_bad(with("o_groups", 8), {(where + "o_groups").c_str()});  // more groups than heads
    expect_bad(with("o_lora_rank", 29064), {(where + "o_lora_rank").c_str(), "58112"});
    expect_bad(with("o_lora_rank", 20), {(where + "o_lora_rank").c_str(), "multiple of 8"});
  }
}

// model.layers: the release layer each block stands for (default 0..blocks-1), where Engram's
// layers are placed; model.prompt_image: text around the image, or text alone. Both read back
// from to_json; the defaults are left out of it (older configs read back the same).
TEST(ModelConfig, SampledLayersPlaceEngramAndThePromptMayBeTextAlone) {
  auto j = tiny_json();  // 16 blocks, Engram at layers 1 and 3 (the defaults)
  const ModelConfig plain = parse_model_config(j, "cfg.json");
  EXPECT_EQ(plain.shape.block_of_layer(3), 3);
  EXPECT_EQ(plain.shape.block_of_layer(16), -1);
  EXPECT_FALSE(to_json(plain.shape).contains("layers"));
  EXPECT_FALSE(to_json(plain.shape).contains("prompt_image"));
  const VisionGeometry g =
      vision_geometry(plain.vision.image_w, plain.vision.image_h, plain.vision.sizing);
  EXPECT_EQ(verification_prompt_tokens(plain), 12 + g.sequence_tokens());
  std::vector<int> layers(16);
  for (int b = 0; b < 16; ++b) layers[size_t(b)] = 2 * b + (b >= 2 ? 10 : 0);  // 0, 2, 14, ..
  j["model"]["layers"] = layers, j["model"]["prompt_image"] = false;
  j["engram"]["layer_ids"] = {2, 14};
  const ModelConfig sampled = parse_model_config(j, "cfg.json");
  EXPECT_EQ(sampled.shape.block_of_layer(2), 1);
  EXPECT_EQ(sampled.shape.block_of_layer(14), 2);
  EXPECT_EQ(sampled.shape.block_of_layer(1), -1);
  EXPECT_EQ(verification_prompt_tokens(sampled), 12);
  EXPECT_EQ(to_json(parse_model_config(to_json(sampled), "again")), to_json(sampled));
  EXPECT_EQ(to_json(sampled.shape)["layers"], layers);
  auto edit = [&](auto f) {
    auto k = j;
    f(k);
    return k;
  };
  expect_bad(edit([](auto& k) {
               k["engram"]["layer_ids"] = {2, 3};
             }),
             {"engram.layer_ids", "layer 3", "stand for layers 0, 2, 14"});
  expect_bad(edit([](auto& k) { k["model"]["layers"].erase(0); }),
             {"model.layers", "15 layers for 16 blocks"});
  expect_bad(edit([](auto& k) { k["model"]["layers"][3] = 14; }),
             {"model.layers", "ascending", "14 after 14"});
  expect_bad(edit([](auto& k) { k["model"]["layers"][0] = -1; }), {"model.layers", "[0, 1023]"});
  expect_bad(edit([](auto& k) { k["model"]["prompt_image"] = 1; }), {"model.prompt_image"});
  // num_hash_layers counts release layers: blocks standing for layers below it hash.
  j["model"]["num_hash_layers"] = 14;  // layers 0 and 2: blocks 0 and 1
  const ModelConfig hashed = parse_model_config(j, "cfg.json");
  EXPECT_TRUE(hashed.shape.hashes(1));
  EXPECT_FALSE(hashed.shape.hashes(2));
  EXPECT_EQ(to_json(parse_model_config(to_json(hashed), "again")), to_json(hashed));
  EXPECT_FALSE(to_json(sampled.shape).contains("num_hash_layers"));
  expect_bad(edit([](auto& k) { k["model"]["num_hash_layers"] = -1; }),
             {"model.num_hash_layers", "[0, 1024]"});
  expect_bad(edit([](auto& k) { k["vision"]["hash_vocab"] = "x"; }), {"vision.hash_vocab"});
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
