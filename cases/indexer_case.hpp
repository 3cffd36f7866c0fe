#pragma once
// Selection cases (problem/indexer.hpp): seeded scores shaped like the indexer's (sums of
// weighted relus: many exact zeros, +-0, negative weights, -inf past the visible length), the
// reference selection and the comparison (bit-exact).
#include <cstdint>
#include <vector>

#include "cases/tensor_check.hpp"
#include "optimized/indexer.hpp"

namespace tandem {

// T query tokens at positions start.. over n compressed entries of ratio r: entry j is visible
// to the token at position p when j < floor((p + 1) / r). `ties`: the share of scores that are
// exact zeros (a head mix of relus that all clipped), the rest drawn from a few levels so equal
// scores recur. Past a row's length every score is kTopkUnread: reading one would select it.
inline constexpr float kTopkUnread = 1e30f;
TopkInputs make_topk_inputs(int64_t T, int64_t n, int k, int ratio, int64_t start, double ties,
                            uint64_t seed);

std::vector<TensorCheck> compare_topk(const TopkInputs& in, const TopkOutputs& out);

// V4.1's candidate selection over one cache (problem/indexer.hpp): the candidate scorer's scores
// (as make_topk_inputs, ratio r) cut into blocks, and a later layer's own scores (another seed)
// selected inside the kept blocks; topk.blocks is the reference's selection of blocks.
struct CandidateCase {
  CandidateBlocksInputs blocks;
  CandidateTopkInputs topk;
};
CandidateCase make_candidate_case(int64_t T, int64_t n, int ratio, int64_t start, double ties,
                                  int block, int keep, int top_k, uint64_t seed);

// Both kernels, each on the case's inputs (candidate_topk on the reference's blocks).
struct CandidateOutputs {
  Tensor<int32_t> blocks, indices;
  LaunchLog launches;
};
CandidateOutputs run_candidates(const CandidateCase& c, const RunOptions& opt);
// Both bit for bit against the reference.
std::vector<TensorCheck> compare_candidates(const CandidateCase& c, const CandidateOutputs& out);

// T query tokens of `heads` heads at positions start.. over n_keys index keys of `format` (values
// in [-2, 2], bf16, quantized by the reference's encoder) in pages of page_size, the sequence's
// pages a seeded permutation of the pool's (one pool page more than it uses, left poisoned);
// queries likewise, head weights in [-1, 1].
IndexLogitsInputs make_index_logits_inputs(KvFormat format, int64_t T, int heads, int64_t n_keys,
                                           int ratio, int64_t start, int64_t page_size,
                                           uint64_t seed);
// The visible scores under the tolerance policy (truth in double, the float baseline summed
// forwards and backwards) and the lengths exactly. `truth`: the visible scores' truth, row after
// row (a golden case's stored one), else the reference's now.
std::vector<TensorCheck> compare_index_logits(const IndexLogitsInputs& in,
                                              const IndexLogitsOutputs& out,
                                              const std::vector<double>* truth = nullptr);
// The reference's visible scores, row after row.
std::vector<double> index_logits_truth(const IndexLogitsInputs& in);

}  // namespace tandem
