#pragma once
// The released attention's low-rank projections (DESIGN 5.6 "q LoRA rank / output groups x
// rank"), shared by the end-to-end model's blocks and DSpark's stages: queries
// W_qb RMSNorm(W_qa y) (then every head RMS-normalised on its own, without a gain), output
// W_ob [G R] of the G groups' W_oa [heads / G x 512 -> R] (block-diagonal).
#include <cstdint>

namespace tandem {

// The defaults: the tiny drafter's (rank its width, two groups of two heads).
struct AttentionLora {
  int q_rank = 32;   // q_lora_rank: a multiple of 8 (the norm's packs) up to 12288
  int o_groups = 2;  // o_groups: dividing the heads
  int o_rank = 32;   // o_lora_rank: a multiple of 8, o_groups x it a row dense_rows stages
};

// The values of one attention's query and output projections (with the query LoRA's norm
// weights) at `heads` of 512 dims and width d.
inline double attention_projection_values(const AttentionLora& a, int heads, int64_t d) {
  const double D = 512, G = a.o_groups;
  return double(a.q_rank) * (double(d) + 1 + heads * D) + a.o_rank * G * (heads * D / G + d);
}

}  // namespace tandem
