#include "sim/engram_traffic.hpp"

#include <string>

namespace tandem::sim {

LaunchLog predict_engram_layer(const EngramConfig& cfg, int64_t tokens, int64_t marker_tokens,
                               ActDType act) {
  const int64_t lookup_tokens = cfg.skip_marker_lookups ? tokens - marker_tokens : tokens;
  const uint64_t T = tokens, L = cfg.lookups(), D = cfg.head_dim, d = cfg.d, e = act_bytes(act);
  const uint64_t E = L * D;
  LaunchCounts gather{"engram_hash_gather"};
  gather.read[int(Traffic::activation)] = T * 4 * sizeof(int64_t);  // ids t-3..t
  gather.written[int(Traffic::coefficient)] = T * L * sizeof(int64_t);
  gather.read[int(Traffic::weight)] = uint64_t(lookup_tokens) * L * cfg.row_bytes();
  gather.written[int(Traffic::activation)] = T * E * sizeof(float);
  LaunchCounts gate{launch_name("engram_gate", act)};
  // h twice: the gate's sums, then the update (engram_gate does not stage it).
  gate.read[int(Traffic::activation)] = T * (sizeof(int64_t) + E * sizeof(float) + 2 * 4 * d * e);
  // Wkv per token: float values, or (FP8) one code byte per weight plus each row's block scales.
  const uint64_t B = cfg.wkv_fp8_block;
  const uint64_t wkv_bytes = B ? 5 * d * (E + E / B) : 5 * d * E * sizeof(float);
  gate.read[int(Traffic::weight)] = T * (wkv_bytes + 4 * d * sizeof(float));
  gate.written[int(Traffic::coefficient)] = T * 4 * sizeof(float);
  gate.written[int(Traffic::activation)] = T * 4 * d * e;
  return {gather, gate};
}

}  // namespace tandem::sim
