#pragma once
// The optimized vision kernels as seen from the host (DESIGN 5.3): zero-padded 3x3
// pixel-unshuffle (and its inverse), 2D RoPE, and the MoE gate with per-modality biases.
#include <cstdint>
#include <vector>

#include "core/tensor.hpp"
#include "optimized/backend.hpp"
#include "optimized/residual.hpp"  // ActDType
#include "optimized/traffic.hpp"

namespace tandem {

struct UnshuffleOutputs {
  Tensor<float> tokens;    // [ceil(h/3) * ceil(w/3), 9 * C], channel-major: c * 9 + ki * 3 + kj
  Tensor<float> restored;  // [h, w, C] from the inverse kernel
  LaunchLog launches;
};
// grid: [h, w, C] patch embeddings (values of act).
UnshuffleOutputs run_unshuffle(const Tensor<float>& grid, ActDType act, const RunOptions& opt);

struct RopeInputs {
  Tensor<float> x;          // [N, heads, hd] (values of act)
  std::vector<int32_t> row, col;  // [N] patch positions
  double theta = 10000;
};
struct RopeOutputs {
  Tensor<float> x;  // [N, heads, hd]
  LaunchLog launches;
};
RopeOutputs run_rope_2d(const RopeInputs& in, ActDType act, const RunOptions& opt);

struct MoeGateInputs {
  Tensor<float> logits;            // [T, E]
  std::vector<uint8_t> is_image;   // [T]
  std::vector<float> bias_text, bias_vl;  // [E] each
  int top_k = 8;
  float route_scale = 1.5f;
};
struct MoeGateOutputs {
  Tensor<int32_t> experts;  // [T, k], in selection order (best first)
  Tensor<float> weights;    // [T, k]
  LaunchLog launches;
};
MoeGateOutputs run_moe_gate(const MoeGateInputs& in, const RunOptions& opt);

namespace emu_backend {
UnshuffleOutputs run_unshuffle(const Tensor<float>& grid, ActDType act, const RunOptions& opt);
RopeOutputs run_rope_2d(const RopeInputs& in, ActDType act, const RunOptions& opt);
MoeGateOutputs run_moe_gate(const MoeGateInputs& in, const RunOptions& opt);
}  // namespace emu_backend
namespace cuda_backend {
UnshuffleOutputs run_unshuffle(const Tensor<float>& grid, ActDType act, const RunOptions& opt);
RopeOutputs run_rope_2d(const RopeInputs& in, ActDType act, const RunOptions& opt);
MoeGateOutputs run_moe_gate(const MoeGateInputs& in, const RunOptions& opt);
}  // namespace cuda_backend

}  // namespace tandem
