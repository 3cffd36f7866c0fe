// Linked as an object (so that its initializer runs) into `tandem`, every test and every
// benchmark. The references build and drop tensors of tens of KiB to MiB on every call (a
// drafter pass's window records, attention's scores, a tap's copy); glibc hands the heap's free
// top back to the kernel once 128 KiB of it is free and serves blocks of 128 KiB or more with a
// fresh mmap, so each call faulted its pages in again. On the 2-core CI VM, where a page fault
// is a hypervisor exit, that was 60% of one DSpark sampling test (13.3 s -> 5.3 s) and 20% of
// the default suite (116 s -> 91 s on 2 cores). Freed memory now stays with the process up to
// 1 GiB at the top, and blocks up to 32 MiB (glibc's largest threshold) come from the heap;
// larger ones (release-width weights) are still mapped and unmapped each time (the `tandem`
// program restarts itself with transparent huge pages for them: app/main.cpp). ASan's
// allocator ignores mallopt.
#include <cstdlib>  // defines __GLIBC__ on glibc
#if defined(__GLIBC__)
#include <malloc.h>

namespace {
const bool malloc_tuned = [] {
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  return true;
}();
}  // namespace
#endif
