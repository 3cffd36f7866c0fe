#!/usr/bin/env bash
# `tandem` restarts itself once with glibc.malloc.hugetlb=1 added to GLIBC_TUNABLES (app/main.cpp:
# transparent huge pages for the memory glibc takes from the kernel); `tandem info` names the
# tunables the running process started with. A setting the caller gave, 0 included, is kept.
# Usage: huge_pages_test.sh TANDEM
set -uo pipefail
tandem=$1
failures=0
# expect TUNABLES WANT: `tandem info` with GLIBC_TUNABLES=TUNABLES ("-": unset) reports WANT.
expect() {
  local given=$1 want=$2 line
  if [[ $given == - ]]; then
    line=$(env -u GLIBC_TUNABLES "$tandem" info | grep '^allocator: ')
  else
    line=$(GLIBC_TUNABLES=$given "$tandem" info | grep '^allocator: ')
  fi
  if [[ $line != "allocator: GLIBC_TUNABLES=$want "* ]]; then
    echo "FAIL: GLIBC_TUNABLES=$given: '$line' (want GLIBC_TUNABLES=$want)"
    failures=$((failures + 1))
  fi
}
expect - glibc.malloc.hugetlb=1
expect glibc.malloc.arena_max=2 glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1
expect glibc.malloc.hugetlb=0 glibc.malloc.hugetlb=0
((failures == 0)) && echo "3 passed"
