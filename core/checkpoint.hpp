#pragma once
// A sharded safetensors checkpoint as the release ships it (DESIGN 5.6): a directory holding
// model.safetensors.index.json, whose weight_map names each tensor's shard (a file in the same
// directory), and the shards. Shards are opened on first use and read piecewise, so a table far
// larger than a test (Engram's, ~98 GB a layer) is sampled by rows, never read whole. And one
// layer's tensors of the components tandem verifies on released weights, by their released
// names, dtypes and shapes.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/fp8_blocks.hpp"
#include "core/release_config.hpp"
#include "core/safetensors.hpp"

namespace tandem {

inline constexpr const char* kCheckpointIndex = "model.safetensors.index.json";

class Checkpoint {
 public:
  // Reads and validates the index: weight_map an object of tensor name -> shard file name, each
  // a plain name in `dir` (no directories, no "..", not a symlink). BadInput naming the file.
  explicit Checkpoint(const std::filesystem::path& dir);
  bool has(const std::string& name) const { return weight_map_.count(name) > 0; }
  // The tensor's entry in its shard, unchecked; missing from the index, the directory or the
  // shard is BadInput naming the tensor and the file.
  const StEntry& find(const std::string& name) const;
  // The tensor's entry in its shard, checked against `dtype` and `shape`: a tensor missing from
  // the index or its shard, a shard missing from the directory, another dtype or shape are
  // BadInput naming the tensor and the file.
  const StEntry& entry(const std::string& name, DType dtype, const Shape& shape) const;
  // Its whole payload (at most kMaxReadBytes), checked as entry().
  std::string read(const std::string& name, DType dtype, const Shape& shape) const;
  // The rows `rows` of a tensor of at least one dimension, in that order, checked as entry();
  // a row outside [0, shape[0]) is BadInput naming the tensor.
  std::string read_rows(const std::string& name, DType dtype, const Shape& shape,
                        const std::vector<int64_t>& rows) const;
  // BadInput naming the tensor and its shard: "<shard>: tensor '<name>': <what>".
  [[noreturn]] void refuse(const std::string& name, const std::string& what) const;

 private:
  const SafetensorsFile& shard_of(const std::string& name) const;

  std::filesystem::path dir_;
  std::string index_name_;
  std::map<std::string, std::string> weight_map_;
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> shards_;
};

// One mHC site's mixing parameters (DESIGN 5.1): fn [24, 4d], base [24], scale [3], F32.
struct HcSiteTensors {
  Tensor<float> fn, base, scale;
};
// The MoE router (DESIGN 5.6): ffn.gate.weight [experts, d] BF16 (as floats: exact), ffn.gate.bias
// [experts] F32, and bias_vl [experts] F32 for image tokens where the release has a vision tower
// (V4.1; empty for V4). The first num_hash_layers layers have ffn.gate.tid2eid [vocab, top_k] I32
// (every entry an expert) in place of ffn.gate.bias.
struct RouterTensors {
  Tensor<float> weight, bias, bias_vl;
  Tensor<int32_t> tid2eid;  // hash layers only
};
// Engram at its layers (DESIGN 5.2): the sampled rows of engram.embed.weight [rows, head_dim]
// F8_E4M3 with engram.embed.scale [rows, head_dim / 32] F8_E8M0, kept quantized as the kernels
// take them; engram.wkv [5d, lookups * head_dim] as a block-FP8 linear (weight F8_E4M3, scale
// F8_E8M0 [ceil(5d / B), ceil(in / B)]); the per-stream gate vectors engram.q_weight and
// engram.k_weight [4, d] (F32 or BF16: DESIGN does not name their dtype).
struct EngramTensors {
  std::vector<int64_t> rows;  // which table rows were read
  Tensor<uint8_t> embed, embed_scale;
  Fp8BlockMatrix wkv;
  Tensor<float> q_weight, k_weight;
};
struct LayerTensors {
  int layer = 0;
  HcSiteTensors hc_attn, hc_ffn;
  RouterTensors gate;
  std::optional<EngramTensors> engram;  // at release.engram's layers only
};

// Layer `layer` of release `r` from checkpoint `c` (names bare: layers.N.*); Engram's tensors at
// its layers when `engram_rows` names table rows to read (only those). BadInput naming the tensor
// and file for anything missing or misshapen.
LayerTensors load_layer_tensors(const Checkpoint& c, const ReleaseConfig& r, int layer,
                                const std::vector<int64_t>& engram_rows);

}  // namespace tandem
