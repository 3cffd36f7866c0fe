#!/usr/bin/env bash
# golden regen --accept killed (SIGKILL, injected by strace) at every step of replacing a case:
# after each kill the case directory holds a whole case (the old pair or the new one), `golden
# check` passes on it, and the next regen removes what the kill left, ending with exactly the
# case's manifest, the blob it names and the shared map.
# Usage: golden_kill_test.sh TANDEM SHIPPED_CASES_DIR
set -euo pipefail
tandem=$1 shipped=$2 case=dspark_verify_greedy map=engram_synthetic_map.safetensors
command -v strace > /dev/null || { echo "strace is missing (ci/bootstrap installs it)"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-golden-kill.XXXXXX")
trap 'rm -rf "$work"' EXIT
blob_of() { sed -n 's/^ *"blob": "\(.*\)",*$/\1/p' "$1"; }
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
# The syscalls of one replacement, in order: the blob's temporary written (fsync 1) and renamed
# (rename 1), the manifest's (fsync 2, rename 2: the commit), the old blob removed (unlink 1).
for point in fsync:1 rename:1 fsync:2 rename:2 unlink:1; do
  sys=${point%:*} n=${point#*:} d=$work/${sys}_$n
  mkdir "$d"
  cp "$shipped/$case.json" "$shipped/$(blob_of "$shipped/$case.json")" "$shipped/$map" "$d/"
  sed -i '0,/"exact"/s//"reference"/' "$d/$case.json"  # a changed rule: --accept rewrites it
  rc=$( (strace -f -qq -o /dev/null -e trace="$sys" -e inject="$sys:signal=KILL:when=$n" \
    "$tandem" golden regen --accept --dir "$d" "$case" > /dev/null 2>&1) 2> /dev/null || echo $?)
  [[ $rc == 137 ]] || fail "$point: regen was not killed there (exit $rc)"
  "$tandem" golden check --backend emu --dir "$d" "$case" > "$d.check" 2>&1 ||
    fail "$point: torn case, check says: $(cat "$d.check")"
  "$tandem" golden regen --accept --dir "$d" "$case" > /dev/null ||
    fail "$point: the regen after the kill failed"
  expected=$(printf '%s\n' "$case.json" "$(blob_of "$d/$case.json")" "$map" | sort)
  left=$(ls -A "$d" | sort)
  [[ $left == "$expected" ]] || fail "$point: left $(echo $left), expected $(echo $expected)"
  "$tandem" golden check --backend emu --dir "$d" "$case" > /dev/null ||
    fail "$point: check fails after the final regen"
done
echo "$((5 - failures)) passed, $failures failed"
((failures == 0))
