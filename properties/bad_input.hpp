#pragma once
// Test helper: `run()` must throw BadInput whose message contains `part`.
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"

namespace tandem {

template <class Run>
void expect_bad_input(Run run, const std::string& part) {
  try {
    run();
    ADD_FAILURE() << "accepted; expected BadInput naming " << part;
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace tandem
