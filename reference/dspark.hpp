#pragma once
// Reference of DSpark's verification and scheduler (DESIGN 5.4), written to read like the rules.
// Decisions use the same float arithmetic as the kernel (discrete outputs must be bit-exact):
// accept x with probability min(1, p_t(x)/max(p_d(x), 1e-8)) as u * max(p_d(x), 1e-8) < p_t(x);
// inverse-CDF draws sum the weights in 32 contiguous blocks, blocks in order (the kernel's warp
// layout); a residual whose mass is <= 1e-8 is replaced by p_t (the public DSpark code's guards).
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "core/dspark_config.hpp"
#include "problem/dspark.hpp"

namespace tandem::reference {

// Sum of w in the kernel's order: 32 contiguous blocks, each summed in order, blocks in order.
float blocked_sum(std::span<const float> w);
// Index drawn from unnormalised weights w >= 0 with uniform u in [0, 1) (inverse CDF).
int32_t inverse_cdf(std::span<const float> w, float u);
// The acceptance rule: accept x with probability min(1, p_t(x) / max(p_d(x), 1e-8)) given u.
inline bool accepts(float u, float p_draft, float p_target) {
  return u * std::max(p_draft, kDraftProbabilityFloor) < p_target;
}
// Lowest index of the largest value.
int32_t argmax(std::span<const float> p);

VerifyOutputs dspark_verify(const VerifyInputs& in);

// Scheduler: survival a_{r,j} = prod_{i<=j} c_{r,i}; candidates admitted greedily by survival
// (ties: lower request, then lower position), prefix-closed; the capacity B maximises
// (R + sum of admitted survivals) * sps[R + B] (ties: smaller B).
struct Schedule {
  int capacity = 0;           // B
  std::vector<int> admitted;  // [R] drafted tokens verified per request (a prefix)
  double value = 0;
};
// The first B candidates in admission order: per request, how many of its drafted tokens.
std::vector<int> admit(const std::vector<std::vector<double>>& confidence, int capacity);
Schedule schedule(const std::vector<std::vector<double>>& confidence,
                  const std::vector<double>& sps);

}  // namespace tandem::reference
