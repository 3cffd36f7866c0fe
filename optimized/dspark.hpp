#pragma once
// DSpark verification as seen from the host (DESIGN 5.4): for each request, K drafted tokens are
// checked against the backbone's distributions in one pass; the step emits the accepted prefix
// plus one token (the residual resample at the first rejection, or the bonus).
#include <cstdint>
#include <vector>

#include "core/dspark_config.hpp"  // kDsparkMaxDraft
#include "core/tensor.hpp"
#include "optimized/backend.hpp"
#include "optimized/traffic.hpp"

namespace tandem {

struct VerifyInputs {
  int64_t requests = 0, vocab = 0;
  int budget = 0;                  // K drafted tokens verified per request (1..8)
  Tensor<int32_t> draft;           // [R, K] drafted token ids
  Tensor<float> p_draft;           // [R, K, V] the drafter's distributions they were drawn from
  Tensor<float> p_target;          // [R, K + 1, V] the backbone's, last row for the bonus
  std::vector<uint32_t> position;  // [R] sequence position of the first drafted token
  uint64_t seed = 0;               // Philox key: draws keyed by (seed, request, position)
  bool greedy = false;             // temperature 0
};

struct VerifyOutputs {
  std::vector<int32_t> accepted;  // [R] in [0, K]
  Tensor<int32_t> emitted;        // [R, K + 1]: accepted prefix, then the extra token; -1 after
  LaunchLog launches;
};

VerifyOutputs run_dspark_verify(const VerifyInputs& in, const RunOptions& opt);

namespace emu_backend {
VerifyOutputs run_dspark_verify(const VerifyInputs& in, const RunOptions& opt);
}
namespace cuda_backend {
VerifyOutputs run_dspark_verify(const VerifyInputs& in, const RunOptions& opt);
}

}  // namespace tandem
