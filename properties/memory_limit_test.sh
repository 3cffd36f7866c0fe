#!/usr/bin/env bash
# A run past the process's memory limit (ulimit -v) is a clear error with exit 2, not exit 3:
# the allocation that fails (std::bad_alloc) says which sizes and flags to lower. The same limit
# holds verify's default residual row. NOTE: not `--jobs 64 --block-workers 64` under 1 GB: about
# one run in 18 glibc aborts a new thread ("failed to register TLS destructor: out of memory")
# before any exception can be thrown.
# Usage: memory_limit_test.sh TANDEM   (not with ASan: its shadow memory needs terabytes of
# address space)
set -uo pipefail
tandem=$1
failures=0
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-memory-limit.XXXXXX")
trap 'rm -rf "$work"' EXIT
# expect LIMIT_KB RC PATTERN ARGS...: the run under the limit exits RC; stderr matches PATTERN
# (an empty PATTERN: stderr is empty).
expect() {
  local limit=$1 want=$2 pattern=$3
  shift 3
  (ulimit -v "$limit" && exec "$tandem" "$@") > /dev/null 2> "$work/err"
  local rc=$?
  if [[ $rc != "$want" ]] || { [[ -z $pattern ]] && [[ -s $work/err ]]; } ||
    { [[ -n $pattern ]] && ! grep -Eq "$pattern" "$work/err"; }; then
    echo "FAIL: ulimit -v $limit; tandem $*: exit $rc (want $want), stderr: $(head -c 400 "$work/err")"
    failures=$((failures + 1))
  fi
}
clear='^tandem: error: (out of memory: lower .*--jobs or --block-workers|cannot start another host thread .*lower --jobs or --block-workers)'
expect 1000000 0 '' verify --backend emu --component residual
expect 150000 2 "$clear" verify --backend emu
((failures == 0)) && echo "2 passed"
((failures == 0))
