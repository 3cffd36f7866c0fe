#pragma once
// Vision cases: seeded inputs for the unshuffle, RoPE and MoE gate kernels, and their comparison
// with the reference, shared by golden files, `tandem verify` and tests.
#include <cstdint>
#include <vector>

#include "cases/case.hpp"
#include "cases/residual_case.hpp"  // TensorCheck
#include "core/vision_config.hpp"
#include "optimized/vision.hpp"
#include "reference/vision.hpp"

namespace tandem {

struct VisionCase : VisionConfig {
  ActDType act = ActDType::f32;
  uint64_t seed = 0;
};

// Seeded gate inputs: `image_tokens` image positions, then `text_tokens` text positions; with
// hash_vocab > 0 a seeded tid2eid table of that many rows and every token an id from it (text
// tokens hash, image tokens rank).
MoeGateInputs make_gate_inputs(int64_t image_tokens, int64_t text_tokens, int experts, int top_k,
                               int hash_vocab, uint64_t seed);

// Pixels from the seed -> preprocessing -> patches -> linear patch embedding; RoPE and gate
// inputs laid out from the geometry.
VisionInputs make_vision_inputs(const VisionCase& c);

struct VisionResults {
  UnshuffleOutputs unshuffle;
  RopeOutputs rope;
  MoeGateOutputs gate;
};
VisionResults run_vision(const VisionInputs& in, ActDType act, const RunOptions& opt);

// Unshuffle, its inverse, the gate's experts: bit-exact; RoPE and gate weights: tolerance.
// The MoE gate's experts bit for bit against the float reference's, its weights under the
// tolerance policy.
std::vector<TensorCheck> compare_gate(const MoeGateInputs& in, const MoeGateOutputs& out);
// The gate on a layer of released weights: the float reference's logits of router_logits_inputs,
// text and image tokens alternating (text only without bias_vl: V4), the layer's ffn.gate.bias /
// bias_vl, the release's top-k and route scale; at a hash layer its tid2eid and seeded token
// ids.
MoeGateInputs router_gate_inputs(const CheckpointLayer& l);

std::vector<TensorCheck> compare_vision(const VisionInputs& in, const VisionResults& out,
                                        ActDType act);

}  // namespace tandem
