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

}  // namespace tandem
