#pragma once
// The KV cache's selection kernels as seen from the host (problem/indexer.hpp).
#include "optimized/backend.hpp"
#include "problem/indexer.hpp"

namespace tandem {

TopkOutputs run_topk_select(const TopkInputs& in, const RunOptions& opt);
CandidateBlocksOutputs run_candidate_blocks(const CandidateBlocksInputs& in, const RunOptions& opt);
TopkOutputs run_candidate_topk(const CandidateTopkInputs& in, const RunOptions& opt);
IndexLogitsOutputs run_index_logits(const IndexLogitsInputs& in, const RunOptions& opt);

namespace emu_backend {
TopkOutputs run_topk_select(const TopkInputs& in, const RunOptions& opt);
CandidateBlocksOutputs run_candidate_blocks(const CandidateBlocksInputs& in, const RunOptions& opt);
TopkOutputs run_candidate_topk(const CandidateTopkInputs& in, const RunOptions& opt);
IndexLogitsOutputs run_index_logits(const IndexLogitsInputs& in, const RunOptions& opt);
}  // namespace emu_backend
namespace cuda_backend {
TopkOutputs run_topk_select(const TopkInputs& in, const RunOptions& opt);
CandidateBlocksOutputs run_candidate_blocks(const CandidateBlocksInputs& in, const RunOptions& opt);
TopkOutputs run_candidate_topk(const CandidateTopkInputs& in, const RunOptions& opt);
IndexLogitsOutputs run_index_logits(const IndexLogitsInputs& in, const RunOptions& opt);
}  // namespace cuda_backend

}  // namespace tandem
