#pragma once
#include <iosfwd>

namespace tandem::app {
// The tandem program: returns the exit code (0 ok, 1 verification failed, 2 bad input, 3
// internal error). With `execute` false it parses and validates every flag and every file a flag
// names (configs, presets, the golden directory's listing) and runs nothing long: no verify, no
// golden check or regen, no files written (the traffic report is still computed and printed).
// The CLI fuzz target uses it.
int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
        bool execute = true);
}  // namespace tandem::app
