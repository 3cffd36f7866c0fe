#pragma once
// Byte model of the selection kernels (optimized/indexer.cuh), launch by launch; must equal the
// emulator's counts.
#include <cstdint>
#include <vector>

#include "problem/indexer.hpp"
#include "problem/kv_record.hpp"
#include "problem/traffic.hpp"

namespace tandem::sim {

// Rows of `lengths` visible scores: a row's length, five passes over its visible scores (four
// radix passes, one collecting), k indices written.
LaunchCounts predict_topk_select(const std::vector<int32_t>& lengths, int k);

// candidate_blocks: a row's length, five passes over every entry of its blocks but the newest
// (pinned, never read), keep ids written.
LaunchCounts predict_candidate_blocks(const std::vector<int32_t>& lengths, int block, int keep);
// candidate_topk: a row's length and its c block ids, five passes over its candidates' visible
// entries, k indices written.
LaunchCounts predict_candidate_topk(const CandidateTopkInputs& in);

// index_logits for T query tokens of `heads` heads over n_keys keys of `format` (their visible
// lengths from start and ratio): a block of 64 keys a token stages the token's queries and
// weights; every visible key is read once per token with its page-table entry; every visible
// score and each token's length are written.
LaunchCounts predict_index_logits(KvFormat format, int64_t T, int heads, int64_t n_keys, int ratio,
                                  int64_t start);

}  // namespace tandem::sim
