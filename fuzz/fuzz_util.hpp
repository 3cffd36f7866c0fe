#pragma once
// What every fuzz target shares: BadInput is the accepted answer to bad input; a differential
// mismatch prints its report and aborts, so libFuzzer saves the input as a crash.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cases/tensor_check.hpp"
#include "optimized/backend.hpp"

namespace tandem::fuzz {

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz: %s\n", what.c_str());
  std::abort();
}

// Every check must pass (section 4 tolerance or bit-exact); `what` names the generated case.
inline void require_pass(const std::vector<TensorCheck>& checks, const std::string& what) {
  for (const TensorCheck& c : checks)
    if (!c.result.pass) fail(what + ": " + c.name + ": " + c.result.summary());
}

// The emulator with a fuzzed resume schedule and block size: results may not depend on either.
inline RunOptions emu_options(FuzzedDataProvider& in) {
  RunOptions o;
  o.backend = Backend::emu;
  o.schedule.order =
      in.PickValueInArray({emu::Order::in_order, emu::Order::reversed, emu::Order::shuffled});
  o.schedule.seed = in.ConsumeIntegral<uint64_t>();
  o.block_threads = 32 * in.ConsumeIntegralInRange(1, 8);
  return o;
}

}  // namespace tandem::fuzz
