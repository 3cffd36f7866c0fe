// Linked as an object (so that its initializer runs) into `tandem`, every test and every
// benchmark. The references build and drop tensors of tens of KiB to MiB on every call (a
// drafter pass's window records, attention's scores, a tap's copy), and at a release's widths a
// launch's inputs are GBs (a token's routed experts, a vocabulary chunk, their device copies). By
// default glibc hands the heap's free top back to the kernel once 128 KiB of it is free, serves
// blocks of 128 KiB or more with a fresh mmap, and gives each thread beyond the first arenas of
// 64 MiB heaps (so a larger block from a row's thread is always mapped afresh): each call faulted
// its pages in again, and on the 2-core CI VM, where a fault is a hypervisor exit and the kernel
// zeroes every page, that was 60% of one DSpark sampling test (13.3 s -> 5.3 s), 20% of the
// default suite (116 s -> 91 s on 2 cores) and 108 of `verify --model v4.1-flash`'s 566 CPU
// seconds. So every thread allocates from the one heap (M_ARENA_MAX 1), no block is mapped on
// its own (M_MMAP_MAX 0) and the heap's free top is never trimmed (M_TRIM_THRESHOLD -1): freed
// memory stays with the process for the next block, and its resident size is the high-water
// mark of what it held at once (the release-width model row: 6.5 GB either way; verify: 4m51s
// -> 3m57s, 27 s in the kernel). Huge pages for the heap: app/main.cpp. ASan's allocator ignores
// mallopt.
#include <cstdlib>  // defines __GLIBC__ on glibc
#if defined(__GLIBC__)
#include <malloc.h>

namespace {
const bool malloc_tuned = [] {
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);
  return true;
}();
}  // namespace
#endif
