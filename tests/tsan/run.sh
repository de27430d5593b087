#!/bin/sh
# ThreadSanitizer run of tests/tsan/concurrent.c (issue 7, item 6). Called from
# CI; it fails loudly, never skips: no clang, a TSan that does not work on this
# machine, a TSan report or a mismatch are all failures.
#     sh tests/tsan/run.sh            (TSAN_CC=clang-15 to pick another clang)
# 1. A positive control: a program with a planted data race must be reported
#    by TSan (exit code 66), or TSan is not working and the run means nothing.
# 2. concurrent.c built with clang -fsanitize=thread -g -O1, once with the
#    scalar backend, once with the SIMD backend of this machine
#    (-march=native: AVX-512 where the CPU has it, else AVX2) and once with
#    FAVOR_DISPATCH and no -m flags (x86-64: the backend is chosen at run time,
#    by the threads' first calls racing to it). The three build at once; each
#    runs with TSAN_OPTIONS=halt_on_error=1: it must exit 0 and TSan must print
#    nothing.
# No OpenMP here: libgomp is not built with TSan instrumentation and its
# internal synchronization shows up as false-positive races, so favor.h is
# compiled without -fopenmp (every call runs on its calling thread; the
# library's own OpenMP paths are covered by tests/test_threads.c instead).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
inc=$here/../../include
CC=${TSAN_CC:-clang}
if ! command -v "$CC" >/dev/null 2>&1; then
    echo "tsan/run.sh: FAIL: $CC not found (ThreadSanitizer needs clang: apt-get install clang)" >&2
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT HUP INT TERM
export TSAN_OPTIONS="halt_on_error=1 exitcode=66"

cat > "$tmp/race.c" <<'RACE'
#include <pthread.h>
static int counter;
static void *bump(void *arg) { (void)arg; ++counter; return 0; }
int main(void)
{
    pthread_t t[2];
    int i;
    for (i = 0; i < 2; ++i) pthread_create(&t[i], 0, bump, 0);
    for (i = 0; i < 2; ++i) pthread_join(t[i], 0);
    return counter == 99;
}
RACE
if ! "$CC" -fsanitize=thread -g -O1 "$tmp/race.c" -o "$tmp/race" -lpthread; then
    echo "tsan/run.sh: FAIL: $CC cannot build with -fsanitize=thread" >&2
    exit 1
fi
rc=0
"$tmp/race" >"$tmp/race.log" 2>&1 || rc=$?
if [ "$rc" -ne 66 ] || ! grep -q 'ThreadSanitizer: data race' "$tmp/race.log"; then
    echo "tsan/run.sh: FAIL: TSan did not report the planted race (exit $rc); output:" >&2
    cat "$tmp/race.log" >&2
    exit 1
fi
echo "tsan/run.sh: positive control: TSan reports a planted race"

# the three builds at once (the dispatched one compiles the library three times)
variants="scalar native dispatch"
for variant in $variants; do
    case $variant in
    scalar) flags=-DFAVOR_NO_SIMD ;;
    native) flags=-march=native ;;
    dispatch) flags=-DFAVOR_DISPATCH ;;
    esac
    ("$CC" -std=c99 -fsanitize=thread -g -O1 -Wall -Wextra "$flags" -I"$inc" \
        "$here/concurrent.c" -o "$tmp/concurrent_$variant" -lpthread -lm ||
        : > "$tmp/$variant.failed") > "$tmp/$variant.build" 2>&1 &
done
wait
status=0
for variant in $variants; do
    cat "$tmp/$variant.build" >&2
    if [ -f "$tmp/$variant.failed" ]; then
        echo "tsan/run.sh: FAIL: concurrent.c does not build ($variant)" >&2
        status=1
        continue
    fi
    rc=0
    "$tmp/concurrent_$variant" >"$tmp/$variant.log" 2>&1 || rc=$?
    cat "$tmp/$variant.log"
    if [ "$rc" -ne 0 ]; then
        echo "tsan/run.sh: FAIL: concurrent ($variant) exited with $rc" >&2
        status=1
    elif grep -q 'ThreadSanitizer' "$tmp/$variant.log"; then
        echo "tsan/run.sh: FAIL: TSan printed a report ($variant)" >&2
        status=1
    fi
done
if [ "$status" -ne 0 ]; then exit 1; fi
echo "tsan/run.sh: passed: no data race, results bit-identical to the serial run"
