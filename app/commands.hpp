#pragma once
#include <iosfwd>

namespace tandem::app {
// The tandem program: returns the exit code (0 ok, 1 verification failed, 2 bad input).
int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err);
}  // namespace tandem::app
