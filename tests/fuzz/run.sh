#!/bin/sh
# Build the libFuzzer harness tests/fuzz/favor_fuzz.c (clang, ASan + UBSan) in two
# variants, the widest SIMD backend this CPU runs (AVX-512 where /proc/cpuinfo
# lists avx512f, else AVX2+FMA) and scalar (-DFAVOR_NO_SIMD), and fuzz each for
# FUZZ_SECONDS on a copy of the committed seed corpus (the repository is never
# written). Its differential checks (I7, I12: workspace kinds, 16-bit against
# fp32 copies) run within each build, so they cover the backend it was built for.
#
#   sh tests/fuzz/run.sh                     # 30 s per variant
#   FUZZ_SECONDS=600 sh tests/fuzz/run.sh    # longer
#
# Environment:
#   FUZZ_SECONDS      seconds per variant (default 30)
#   FAVOR_FUZZ_BUILD  build and work directory (default /tmp/favor-fuzz)
#   FUZZ_VARIANTS     which variants, of avx512, avx2 and scalar (default
#                     "avx512 scalar" on an AVX-512 CPU, else "avx2 scalar")
#   CC                the compiler (default clang; must support -fsanitize=fuzzer)
#   FAVOR_INCLUDE     the directory holding favor.h (default: include/ of this tree)
#   FUZZ_FLAGS        extra libFuzzer flags (e.g. "-jobs=2 -workers=2")
#
# Exits non-zero when clang or its fuzzer runtime is missing (no silent skip),
# when the CPU cannot run a requested variant, or when any input crashes; the
# crashing input is left in $FAVOR_FUZZ_BUILD/artifacts-<variant>/. Prints the
# executions of each variant (libFuzzer's stat::number_of_executed_units) and
# the total.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${FAVOR_FUZZ_BUILD:-/tmp/favor-fuzz}
seconds=${FUZZ_SECONDS:-30}
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
    variants=${FUZZ_VARIANTS:-"avx512 scalar"}
else
    variants=${FUZZ_VARIANTS:-"avx2 scalar"}
fi
cc=${CC:-clang}
max_len=4096
inc=${FAVOR_INCLUDE:-$root/include}
[ -f "$inc/favor.h" ] || { echo "tests/fuzz/run.sh: ERROR: no favor.h in $inc" >&2; exit 1; }

die() {
    echo "tests/fuzz/run.sh: ERROR: $*" >&2
    exit 1
}

command -v "$cc" >/dev/null 2>&1 ||
    die "'$cc' not found: install clang and its fuzzer runtime (Debian: apt-get install clang libclang-rt-14-dev)"
mkdir -p "$build"

# the fuzzer runtime: a one-line fuzz target must link
probe="$build/probe.c"
printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' >"$probe"
if ! "$cc" -fsanitize=fuzzer,address,undefined "$probe" -o "$build/probe" >"$build/probe.log" 2>&1; then
    cat "$build/probe.log" >&2
    die "'$cc' cannot link -fsanitize=fuzzer,address,undefined: install the fuzzer runtime (Debian: libclang-rt-14-dev)"
fi

cflags="-std=c99 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Wall -Wextra"
total=0
for v in $variants; do
    case $v in
    avx2)
        vflags="-mavx2 -mfma"
        grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo 2>/dev/null ||
            die "this CPU has no AVX2+FMA: set FUZZ_VARIANTS=scalar to fuzz the scalar build only"
        ;;
    avx512)
        vflags="-mavx512f -mavx512dq -mavx512bw -mavx512vl -mfma -mf16c"
        grep -qw avx512f /proc/cpuinfo 2>/dev/null ||
            die "this CPU has no AVX-512F: set FUZZ_VARIANTS=\"avx2 scalar\""
        ;;
    scalar) vflags="-DFAVOR_NO_SIMD" ;;
    *) die "unknown variant '$v' (avx512, avx2 or scalar)" ;;
    esac
    bin="$build/favor_fuzz_$v"
    echo "== build $v: $cc $cflags $vflags"
    # shellcheck disable=SC2086
    "$cc" $cflags $vflags -I"$inc" "$here/favor_fuzz.c" -lm -o "$bin" ||
        die "building the $v harness failed"

    # the committed reproducers must not crash (their findings are guarded)
    if [ -d "$here/repro" ] && [ -n "$(ls -A "$here/repro" 2>/dev/null)" ]; then
        echo "== $v: replay tests/fuzz/repro"
        "$bin" "$here"/repro/* >"$build/repro-$v.log" 2>&1 || {
            cat "$build/repro-$v.log" >&2
            die "$v: a reproducer in tests/fuzz/repro crashed"
        }
    fi

    work="$build/corpus-$v"
    art="$build/artifacts-$v"
    rm -rf "$work" "$art"
    mkdir -p "$work" "$art"
    cp "$here"/corpus/* "$work"/
    log="$build/fuzz-$v.log"
    echo "== fuzz $v for ${seconds}s (log: $log)"
    status=0
    # shellcheck disable=SC2086
    "$bin" -seed=1 -max_len=$max_len -max_total_time="$seconds" -timeout=60 \
        -print_final_stats=1 -artifact_prefix="$art/" ${FUZZ_FLAGS:-} "$work" >"$log" 2>&1 || status=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -n 1 | sed -n 's/.*\(cov: [0-9]* ft: [0-9]*\).*/\1/p')
    if [ "$status" -ne 0 ] || ls "$art"/crash-* "$art"/leak-* "$art"/timeout-* "$art"/oom-* >/dev/null 2>&1; then
        grep -E 'INVARIANT VIOLATION|ERROR: |SUMMARY: |runtime error' "$log" | head -n 20 >&2 || true
        echo "tests/fuzz/run.sh: $v: ${execs:-?} executions, then a crash; input(s) in $art:" >&2
        ls -l "$art" >&2
        die "$v: the fuzzer found a crash (full log: $log)"
    fi
    [ -n "$execs" ] || die "$v: no stat::number_of_executed_units in $log"
    echo "== $v: $execs executions, ${cov:-cov ?}, corpus $(ls "$work" | wc -l) files"
    total=$((total + execs))
done
echo "== total: $total executions, no crash"
