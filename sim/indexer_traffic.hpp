#pragma once
// Byte model of the selection kernels (optimized/indexer.cuh), launch by launch; must equal the
// emulator's counts.
#include <cstdint>
#include <vector>

#include "problem/traffic.hpp"

namespace tandem::sim {

// Rows of `lengths` visible scores: a row's length, five passes over its visible scores (four
// radix passes, one collecting), k indices written.
LaunchCounts predict_topk_select(const std::vector<int32_t>& lengths, int k);

}  // namespace tandem::sim
