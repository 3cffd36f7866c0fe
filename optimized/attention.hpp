#pragma once
// The optimized causal attention as seen from the host (problem/attention.hpp).
#include "optimized/backend.hpp"
#include "problem/attention.hpp"

namespace tandem {

AttentionOutputs run_attention_causal(const AttentionInputs& in, const RunOptions& opt);

namespace emu_backend {
AttentionOutputs run_attention_causal(const AttentionInputs& in, const RunOptions& opt);
}
namespace cuda_backend {
AttentionOutputs run_attention_causal(const AttentionInputs& in, const RunOptions& opt);
}

}  // namespace tandem
