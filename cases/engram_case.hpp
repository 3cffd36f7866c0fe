#pragma once
// Engram cases: seeded token sequences and layer inputs, and the reference-vs-optimized
// comparison, shared by golden files, `tandem verify`, tests and benchmarks.
#include <cstdint>
#include <vector>

#include "cases/residual_case.hpp"  // TensorCheck
#include "core/compare.hpp"
#include "core/release_config.hpp"
#include "core/safetensors.hpp"
#include "optimized/engram.hpp"
#include "reference/engram.hpp"

namespace tandem {

// Token ids in [0, vocab) with runs of image positions (-2) and DEAD separators (-1).
std::vector<int64_t> synthetic_token_ids(int64_t tokens, int64_t vocab, uint64_t seed,
                                         bool with_markers = true);

// Inputs for Engram layer `layer_index` of cfg.layer_ids over raw token `ids` (compressed here).
EngramInputs make_engram_inputs(const EngramConfig& cfg, const reference::CompressionMap& map,
                                const std::vector<int64_t>& ids, int layer_index, ActDType act,
                                uint64_t seed);

// Engram at layer `layer` of release r (an Engram layer of it) as verify --weights runs it: the
// layout at r's width with its FP8 block and norm eps, `tokens` seeded ids over r's vocabulary
// (a synthetic compression map: the real one is the tokenizer's) behind 3 of history, seeded
// streams h, bf16 activations. The table, Wkv and gate come from the checkpoint.
EngramInputs engram_checkpoint_inputs(const ReleaseConfig& r, int layer, int64_t tokens,
                                      uint64_t seed);
// The table rows those tokens read (ascending, distinct): what to load of the layer's table;
// empty where the layer has no Engram.
std::vector<int64_t> engram_checkpoint_rows(const ReleaseConfig& r, int layer, int64_t tokens,
                                            uint64_t seed);
// `in` with its whole table sampled to `rows` (ascending addresses): EngramInputs::table_rows.
EngramInputs with_sampled_table(EngramInputs in, const std::vector<int64_t>& rows);

// The reference side of one case: exact addresses and rows, truth and baseline gates.
struct EngramReference {
  Tensor<int64_t> addresses;
  Tensor<float> rows;
  reference::GateOutputs truth, baseline;
};
EngramReference run_engram_reference(const EngramInputs& in);

// Addresses and rows bit-exact; gates and h_out under the tolerance policy (row = one token).
std::vector<TensorCheck> compare_engram(const EngramReference& ref, const EngramOutputs& out,
                                        ActDType act);

}  // namespace tandem
