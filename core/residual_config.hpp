#pragma once
// The residual path's configuration (DESIGN section 5.1); parsed in core/model_config.cpp.

namespace tandem {

// RMSNorm eps of the releases (DESIGN 5.6): V4 1e-6; the released V4.1 uses 1e-20 in every
// RMSNorm (the Engram gate's included).
inline constexpr double kV4NormEps = 1e-6, kV41NormEps = 1e-20;

// The widest residual.d: the kernels stage a [d] float row in shared memory (12288 floats are
// CUDA's default 48 KiB; with the kernels' static arrays their launches opt into more).
inline constexpr int kResidualMaxWidth = 12288;

struct ResidualConfig {
  int hc_mult = 4;  // streams n; the kernels are written for 4
  int d = 64;       // hidden width per stream; a multiple of 8 (16-byte bf16 packs)
  int sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double norm_eps = 1e-6;
  int sites = 4;   // residual sites in a stack (two per block: attention, FFN)
  int tokens = 8;  // tokens per verification case
};

}  // namespace tandem
