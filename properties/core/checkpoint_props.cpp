// core/checkpoint: a synthetic sharded checkpoint written in the release's layout (DESIGN 5.6:
// model.safetensors.index.json + shards, bare names, F8_E4M3 weights with F8_E8M0 block scales)
// for a small V4.1-shaped release reads back exactly, Engram's table by sampled rows; bad
// checkpoints are BadInput naming the tensor and the file.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "bad_input.hpp"
#include "core/atomic_file.hpp"
#include "core/checkpoint.hpp"
#include "core/dtype.hpp"
#include "core/engram_config.hpp"
#include "core/philox.hpp"
#include "synthetic_checkpoint.hpp"
#include "test_dir.hpp"

namespace tandem {
namespace {

template <class T>
Tensor<T> stored(const Safetensors& st, const std::string& name) {
  return st.get_as<T>(name, "written");
}

TEST(Checkpoint, LayerTensorsReadBackByTheirReleasedNames) {
  const TestDir dir;
  const ReleaseConfig r = small_release();
  const Written w = make_checkpoint(r);
  w.write(dir.path());
  const Checkpoint c(dir.path());
  const std::vector<int64_t> rows = {0, 7, w.table_rows - 1, 7};
  const LayerTensors t = load_layer_tensors(c, r, 1, rows);
  EXPECT_EQ(t.hc_attn.fn.data, stored<float>(w.shard1, "layers.1.hc_attn_fn").data);
  EXPECT_EQ(t.hc_ffn.scale.data, stored<float>(w.shard1, "layers.1.hc_ffn_scale").data);
  EXPECT_EQ(t.gate.bias_vl.data, stored<float>(w.shard1, "layers.1.ffn.gate.bias_vl").data);
  const Tensor<bf16> gate = stored<bf16>(w.shard1, "layers.1.ffn.gate.weight");
  ASSERT_EQ(t.gate.weight.shape, (Shape{8, 64}));
  for (size_t i = 0; i < gate.data.size(); ++i)
    ASSERT_EQ(t.gate.weight.data[i], float(gate.data[i]));
  ASSERT_TRUE(t.engram);
  const std::string& table = w.shard2.tensors.at("layers.1.engram.embed.weight").bytes;
  ASSERT_EQ(t.engram->embed.shape, (Shape{4, 256}));
  for (size_t i = 0; i < rows.size(); ++i)  // each sampled row, in the order asked
    EXPECT_EQ(std::string(t.engram->embed.data.begin() + i * 256,
                          t.engram->embed.data.begin() + (i + 1) * 256),
              table.substr(size_t(rows[i]) * 256, 256))
        << "row " << rows[i];
  EXPECT_EQ(t.engram->embed_scale.shape, (Shape{4, 8}));
  EXPECT_EQ(dequantize(t.engram->wkv).data, dequantize(w.wkv).data);
  EXPECT_EQ(t.engram->q_weight.data, stored<float>(w.shard2, "layers.1.engram.q_weight").data);
  const Tensor<bf16> k = stored<bf16>(w.shard2, "layers.1.engram.k_weight");
  EXPECT_EQ(t.engram->k_weight.data[5], float(k.data[5]));
  // Layer 2 has no Engram.
  EXPECT_FALSE(load_layer_tensors(c, r, 2, rows).engram);
  EXPECT_TRUE(t.gate.tid2eid.data.empty());  // a ranking layer: its bias, no table
  EXPECT_EQ(t.gate.bias.data, stored<float>(w.shard1, "layers.1.ffn.gate.bias").data);
}

// The first num_hash_layers layers (the small release's: layer 0) read ffn.gate.tid2eid, I32
// [vocab, top_k], in place of ffn.gate.bias, which they do not have; bias_vl as any layer.
TEST(Checkpoint, AHashLayerReadsItsTokenTableInPlaceOfTheBias) {
  const TestDir dir;
  const ReleaseConfig r = small_release();
  ASSERT_EQ(r.hash_layers, 1);
  Written w = make_checkpoint(r, false);
  ASSERT_FALSE(w.shard1.tensors.count("layers.0.ffn.gate.bias"));
  w.write(dir.path());
  const LayerTensors t = load_layer_tensors(Checkpoint(dir.path()), r, 0, {});
  EXPECT_EQ(t.gate.tid2eid.shape, (Shape{r.vocab, r.top_k}));
  EXPECT_EQ(t.gate.tid2eid.data, stored<int32_t>(w.shard1, "layers.0.ffn.gate.tid2eid").data);
  EXPECT_TRUE(t.gate.bias.data.empty());
  EXPECT_EQ(t.gate.bias_vl.data, stored<float>(w.shard1, "layers.0.ffn.gate.bias_vl").data);
  const std::string name = "layers.0.ffn.gate.tid2eid";
  auto load = [&] { load_layer_tensors(Checkpoint(dir.path()), r, 0, {}); };
  Tensor<int32_t> table = stored<int32_t>(w.shard1, name);
  table.data[size_t(5 * r.top_k + 2)] = r.routed_experts;  // one past the last expert
  w.shard1.put(name, table);
  w.write(dir.path());
  expect_bad_input(load,
                   "model-00001-of-00002.safetensors: tensor 'layers.0.ffn.gate.tid2eid': "
                   "token 5 expert 2 is 8, outside the experts [0, 8)");
  table.data[size_t(5 * r.top_k + 2)] = -1;
  w.shard1.put(name, table);
  w.write(dir.path());
  expect_bad_input(load, "token 5 expert 2 is -1");
  Tensor<int64_t> wide(table.shape);  // the right values in another dtype
  w.shard1.put(name, wide);
  w.write(dir.path());
  expect_bad_input(load, "tensor 'layers.0.ffn.gate.tid2eid': dtype I64 where I32");
  w.shard1.put(name, Tensor<int32_t>({r.vocab, r.top_k - 1}, 0));
  w.write(dir.path());
  expect_bad_input(load, fmt::format("tensor 'layers.0.ffn.gate.tid2eid': shape [{}, {}] where",
                                     r.vocab, r.top_k - 1));
  w.weight_map.erase(name);
  w.write(dir.path());
  expect_bad_input(load, "tensor 'layers.0.ffn.gate.tid2eid' missing from weight_map");
}

TEST(Checkpoint, BadCheckpointsNameTheTensorAndFile) {
  const ReleaseConfig r = small_release();
  const Written ok = make_checkpoint(r);
  auto load = [&](const TestDir& dir, int layer = 1, std::vector<int64_t> rows = {0}) {
    return [&dir, &r, layer, rows] { load_layer_tensors(Checkpoint(dir.path()), r, layer, rows); };
  };
  {  // a tensor the index does not list
    const TestDir dir;
    Written w = ok;
    w.weight_map.erase("layers.1.hc_ffn_base");
    w.write(dir.path());
    expect_bad_input(load(dir),
                     "model.safetensors.index.json: tensor 'layers.1.hc_ffn_base' "
                     "missing from weight_map");
  }
  {  // listed, but not in its shard
    const TestDir dir;
    Written w = ok;
    w.shard1.tensors.erase("layers.1.ffn.gate.bias");
    w.write(dir.path());
    expect_bad_input(load(dir),
                     "model-00001-of-00002.safetensors: tensor 'layers.1.ffn.gate."
                     "bias' missing (the index puts it in this shard)");
  }
  {  // wrong dtype, wrong shape
    const TestDir dir;
    Written w = ok;
    put_bf16(w.shard1, "layers.1.hc_attn_fn", seeded({24, 256}, 1));
    w.shard1.put("layers.1.hc_attn_base", seeded({25}, 2));
    w.write(dir.path());
    expect_bad_input(load(dir), "tensor 'layers.1.hc_attn_fn': dtype BF16 where F32");
    w.shard1.put("layers.1.hc_attn_fn", seeded({24, 256}, 1));
    w.write(dir.path());
    expect_bad_input(load(dir), "tensor 'layers.1.hc_attn_base': shape [25] where [24]");
  }
  {  // the index names a shard that is not there
    const TestDir dir;
    Written w = ok;
    w.weight_map["layers.1.engram.wkv.scale"] = "model-00003-of-00002.safetensors";
    w.write(dir.path());
    expect_bad_input(load(dir), "in shard 'model-00003-of-00002.safetensors', which is missing");
  }
  for (const char* hostile : {"../../etc/passwd", "/etc/passwd", "sub/x.safetensors", ".."}) {
    const TestDir dir;  // never opened: refused when the index is read
    Written w = ok;
    w.weight_map["layers.1.hc_attn_fn"] = hostile;
    w.write(dir.path());
    expect_bad_input(load(dir), "a shard is a file name in the checkpoint's directory");
  }
  {  // a shard that is a symlink (here to another file of the test's own directory)
    const TestDir dir;
    ok.write(dir.path());
    std::filesystem::rename(dir / "model-00002-of-00002.safetensors", dir / "elsewhere");
    std::filesystem::create_symlink(dir / "elsewhere", dir / "model-00002-of-00002.safetensors");
    expect_bad_input(load(dir), "model-00002-of-00002.safetensors: a symlink");
  }
  // Non-finite weights: a float NaN or infinity (F32, BF16), an E4M3 NaN code (0x7f, 0xff) or
  // an E8M0 NaN scale (0xff), one element of one tensor at a time, named with the tensor, its
  // shard and the element (the Engram table by the row the tokens read).
  struct Poison {
    const char* tensor;
    size_t byte;
    std::string bytes;
    const char* message;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  auto f32 = [](float v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  const Poison poisons[] = {
      {"layers.1.hc_attn_fn", 4 * 7, f32(nan), "tensor 'layers.1.hc_attn_fn': element 7 is nan"},
      {"layers.1.hc_ffn_scale", 4, f32(inf), "tensor 'layers.1.hc_ffn_scale': element 1 is inf"},
      {"layers.1.ffn.gate.bias", 0, f32(-inf), "'layers.1.ffn.gate.bias': element 0 is -inf"},
      {"layers.1.ffn.gate.weight", 2 * 3, std::string("\xc0\x7f", 2),  // bf16 NaN
       "model-00001-of-00002.safetensors: tensor 'layers.1.ffn.gate.weight': element 3 is nan"},
      {"layers.1.engram.wkv.weight", 5, std::string("\x7f", 1),
       "model-00002-of-00002.safetensors: tensor 'layers.1.engram.wkv.weight': byte 5 is 0x7f"},
      {"layers.1.engram.wkv.scale", 0, std::string("\xff", 1),
       "'layers.1.engram.wkv.scale': byte 0 is 0xff, a NaN E8M0 code"},
      {"layers.1.engram.embed.weight", 3, std::string("\xff", 1),
       "'layers.1.engram.embed.weight': row 0 byte 3 is 0xff, a NaN E4M3 code"},
      {"layers.1.engram.k_weight", 0, std::string("\x80\x7f", 2), "element 0 is inf"},
  };
  for (const Poison& poison : poisons) {
    const TestDir dir;
    Written w = ok;
    Safetensors& shard = w.shard1.tensors.count(poison.tensor) ? w.shard1 : w.shard2;
    shard.tensors.at(poison.tensor).bytes.replace(poison.byte, poison.bytes.size(), poison.bytes);
    w.write(dir.path());
    expect_bad_input(load(dir), poison.message);
  }
  {  // an index that is a symlink (to a file of the test's own directory): never followed
    const TestDir dir;
    ok.write(dir.path());
    std::filesystem::rename(dir / kCheckpointIndex, dir / "elsewhere.json");
    std::filesystem::create_symlink(dir / "elsewhere.json", dir / kCheckpointIndex);
    expect_bad_input(load(dir), "model.safetensors.index.json: a symlink");
  }
  {  // a truncated shard, a row past the table, a layer past the model, a broken index
    const TestDir dir;
    ok.write(dir.path());
    expect_bad_input(load(dir, 1, {ok.table_rows}),
                     fmt::format("'layers.1.engram.embed.weight': row {} outside", ok.table_rows));
    expect_bad_input(load(dir, 40), "--layer: 40 outside");
    const std::string shard = read_file(dir / "model-00002-of-00002.safetensors");
    write_file_atomic(dir / "model-00002-of-00002.safetensors",
                      std::string_view(shard).substr(0, shard.size() / 2));
    expect_bad_input(load(dir), "model-00002-of-00002.safetensors: field 'layers.1.");
    write_file_atomic(dir / kCheckpointIndex, std::string_view(R"({"weight_map": [1, 2]})"));
    expect_bad_input(load(dir), "field 'weight_map': an object");
    std::filesystem::remove(dir / kCheckpointIndex);
    expect_bad_input(load(dir), "model.safetensors.index.json: cannot open");
  }
}

}  // namespace
}  // namespace tandem
