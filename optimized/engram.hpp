#pragma once
// The optimized Engram layer as seen from the host (problem/engram.hpp).
#include "optimized/backend.hpp"
#include "problem/engram.hpp"

namespace tandem {

EngramOutputs run_engram_layer(const EngramInputs& in, const RunOptions& opt);

namespace emu_backend {
EngramOutputs run_engram_layer(const EngramInputs& in, const RunOptions& opt);
}
namespace cuda_backend {
EngramOutputs run_engram_layer(const EngramInputs& in, const RunOptions& opt);
}

}  // namespace tandem
