#pragma once
// Byte model of the DSpark verification kernel; must equal the emulator's counts exactly. Its
// reads depend on the decisions (how far each request gets, which token the inverse CDF lands
// on), so the model takes them as input: it predicts bytes, not outcomes.
#include "problem/dspark.hpp"
#include "problem/traffic.hpp"

namespace tandem::sim {

LaunchLog predict_dspark_verify(const VerifyInputs& in, const VerifyOutputs& decisions);

}  // namespace tandem::sim
