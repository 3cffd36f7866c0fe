#pragma once
// Seeded loops that are not RapidCheck properties (a case costs whole model passes) follow
// RapidCheck's budget: `n` cases at its default of 100 (RC_PARAMS max_success), scaled with it,
// rounded up and at least one: the sanitizer pass's quarter runs n / 4, the exhaustive tier's 2000
// runs 20 n.
#include <rapidcheck/detail/Configuration.h>

#include <algorithm>
#include <cstdint>

namespace tandem::test {

inline uint64_t scaled_cases(uint64_t n) {
  const auto max_success = uint64_t(rc::detail::configuration().testParams.maxSuccess);
  return std::max<uint64_t>(1, (n * max_success + 99) / 100);
}

}  // namespace tandem::test
