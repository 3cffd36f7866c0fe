#include <sys/auxv.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "app/commands.hpp"

namespace {

// A release-width run's heap grows to GBs (weights, expert tables, logits: core/malloc_tuning.cpp
// keeps them all in the one heap), and on a VM each 4 KiB page of it faults in as a hypervisor
// exit: 40% of the release-width model row's time when each block was mapped afresh. The tunable
// glibc.malloc.hugetlb=1 has malloc advise transparent huge pages on the memory it takes from the
// kernel (THP mode "madvise", Debian's default, maps only advised memory with them): a 2 MiB page
// per fault. Tunables are read when the process
// starts, so the program starts itself once more with it set (a GLIBC_TUNABLES that already
// names it, 0 included, is kept as it is). If that exec fails, it runs as it is. Not restarted:
// a privileged (setuid or capability) run, whose tunables glibc drops at start (it would restart
// forever), and a run through the dynamic loader (/proc/self/exe is then the loader).
void restart_with_huge_pages(char** argv) {
#if defined(__GLIBC__)
  if (getauxval(AT_SECURE) != 0) return;
  std::error_code error;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", error).filename();
  if (error || self.starts_with("ld-") || self.starts_with("ld.so")) return;
  const char* given = std::getenv("GLIBC_TUNABLES");
  const std::string tunables = given ? given : "";
  if (tunables.find("glibc.malloc.hugetlb") != std::string::npos) return;
  const std::string with = (tunables.empty() ? "" : tunables + ":") + "glibc.malloc.hugetlb=1";
  if (setenv("GLIBC_TUNABLES", with.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  if (given)
    setenv("GLIBC_TUNABLES", tunables.c_str(), 1);
  else
    unsetenv("GLIBC_TUNABLES");
#else
  (void)argv;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  restart_with_huge_pages(argv);
  return tandem::app::run(argc, argv, std::cout, std::cerr);
}
