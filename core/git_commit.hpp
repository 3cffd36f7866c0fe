#pragma once
// The commit the binary was built from (`git describe --always --dirty`), stamped at build time
// (cmake/git_commit.cmake), not at configure time: golden manifests and `tandem info` name it.

namespace tandem {

extern const char* const kGitCommit;

}  // namespace tandem
