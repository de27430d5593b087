#!/bin/sh
# The whole native test suite (scalar and one SIMD variant, examples) under the
# dynamic checkers; any report fails the job. The ASan jobs and TSan take the
# AVX-512 backend where the CPU has AVX-512F, instead of AVX2 (tests/simd_variant.sh;
# TSan: -march=native); valgrind cannot decode AVX-512 and keeps scalar and AVX2;
# the fuzzer takes the widest backend the CPU runs, and scalar.
# Run by .ci/run; each job alone:
#
#   sh tests/sanitizers.sh asan-gcc     gcc   -fsanitize=address,undefined (the asan preset)
#   sh tests/sanitizers.sh asan-clang   clang -fsanitize=address,undefined (not in .ci/run:
#                                       there clang's sanitizers run in the fuzz job)
#   sh tests/sanitizers.sh valgrind     valgrind memcheck, the test binaries (all but
#                                       the two minutes-long ones; see job_valgrind)
#   sh tests/sanitizers.sh tsan         concurrent calls under clang -fsanitize=thread
#                                       (tests/tsan/run.sh)
#   sh tests/sanitizers.sh fuzz         the libFuzzer harness, FUZZ_SECONDS per backend
#                                       (tests/fuzz/run.sh)
#
# Sanitizers stop at the first report (-fno-sanitize-recover=all, halt_on_error);
# valgrind's --error-exitcode turns any memcheck error or definite leak into a
# failed test. Build trees go to build/sanitizers/.
set -eu
cd "$(dirname "$0")/.."
jobs=${FAVOR_JOBS:-2}
out=build/sanitizers
mkdir -p "$out"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# libomp's own allocations only (see the file); the clang job unwinds slowly to match them
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp}

. tests/simd_variant.sh

asan() { # $1 compiler
    echo "== $1 -fsanitize=address,undefined: the suite"
    # The asan preset compiles at -O1 -g1: line tables, so reports name the file
    # and line; full -g made gcc 12's ASan + UBSan compile of the AVX-512
    # library 1.3-1.9x as long (Xeon Cascade Lake) and adds nothing to a report.
    # shellcheck disable=SC2046
    # Without the FAVOR_DISPATCH variant (each dispatched program is three
    # copies of the library, the same kernels these variants run; the README
    # step and the clang -O3 portability job run the dispatched suite), and the
    # examples built plainly (the scalar backend; FAVOR_NATIVE=OFF,
    # FAVOR_EXAMPLES_DISPATCH=OFF): what ASan checks in them is their own code
    # (favor_npy's .npy parsing, favor_train's model), and the suite's SIMD
    # variant runs the kernels they call. With AVX-512 under ASan + UBSan each
    # whole copy of the library is a 50-100 s compile (Xeon Cascade Lake, gcc
    # 12): the four -march=native examples were 45% of this build.
    # No tests/symbols/check.sh (the compiler's symbols, whatever the flags:
    # the README step and the clang -O3 portability job run it).
    # Without long_recurrence, not built either: 10^7 tokens of register
    # arithmetic on a few small arrays (77 s of a Zen 3's ASan run; the buffers
    # it passes are the ones test_recurrent checks here); the README step and
    # the m32 job run it.
    # Nor tsan_concurrent (FAVOR_TEST_CONCURRENT=OFF): the suite makes its calls
    # here, and the TSan job races them; its AVX-512 copy of the library was the
    # longest compile of this build.
    # gcc: -fno-inline-functions-called-once -fira-region=one. With ASan, gcc
    # 12 spent most of an AVX-512 library's compile in register allocation
    # (-ftime-report: "integrated RA") over the large functions that inlining
    # the called-once kernels makes; without that inlining and with one
    # allocation region, 115 s -> 39 s per copy of the library (Xeon Cascade
    # Lake). The instrumentation is the same: every access is still checked.
    dbg=-g1
    if [ "$1" = gcc ]; then dbg="-g1 -fno-inline-functions-called-once -fira-region=one"; fi
    CC=$1 cmake --preset asan -B "$out/asan-$1" -DFAVOR_TEST_DISPATCH=OFF -DFAVOR_NATIVE=OFF \
        -DFAVOR_EXAMPLES_DISPATCH=OFF -DFAVOR_TEST_SYMBOLS=OFF -DFAVOR_TEST_LONG_RECURRENCE=OFF \
        -DFAVOR_TEST_CONCURRENT=OFF "-DCMAKE_C_FLAGS_DEBUG=$dbg" \
        $(favor_simd_variant_options) >/dev/null
    cmake --build "$out/asan-$1" -j"$jobs" >/dev/null
    ctest --test-dir "$out/asan-$1" --output-on-failure -j"$jobs"
}

job_valgrind() {
    echo "== valgrind memcheck: the test binaries of the suite"
    # -O1 -g: readable reports. FAVOR_NATIVE=OFF and FAVOR_EXAMPLES_DISPATCH=OFF:
    # the examples are built plainly (scalar), not with -march=native, which is
    # AVX-512 code on such a CPU, and valgrind stops on its first AVX-512
    # instruction (SIGILL), nor dispatched (three copies of the library to
    # build; under valgrind, which hides AVX-512 from cpuid, the dispatcher
    # would choose AVX2); for the same reason FAVOR_TEST_AVX512=OFF (the ASan
    # jobs run that variant). Left out: the bench; the training smoke test and
    # the interop test (driven by cmake -P and Python, not wrapped);
    # tsan_concurrent (not built: the TSan job races it); the 10^7-token recurrence (not
    # built) and the exp and tanh sweeps (minutes under valgrind, register
    # arithmetic on a few small arrays; the ASan jobs run the sweeps, the README
    # step the recurrence); test_features (its statistics draw
    # the same feature maps thousands of times, 160 s on a Zen 3; every linear
    # suite draws them too); the AVX2 variants of every suite but test_dtypes
    # and the examples and standalone tests (the scalar variants run the same
    # kernels here, written once over the vector layer, and test_backward alone
    # took over 16 minutes under valgrind; the ASan/UBSan jobs run them all; the
    # AVX2 vocabulary, its loads, stores, tails and 16-bit conversions, still
    # runs here through every entry point in test_dtypes, whose every call is
    # made on 16-bit and on fp32 tensors); the scalar variant of test_dtypes
    # (the same entry points and kernels as its AVX2 variant, and the scalar
    # vocabulary runs here in every other suite); and test_backends (the
    # backends compared, 189 s of the Xeon's valgrind run in its AVX2 variant:
    # its calls are the ones test_dtypes and the scalar suites make here; the
    # README step and the ASan job compare the backends). No
    # --track-origins: it finds no more errors and costs time; to see where an
    # uninitialised value came from, rerun the failing test by hand with it.
    dir=$out/valgrind
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g" -DFAVOR_BUILD_BENCH=OFF -DFAVOR_NATIVE=OFF \
        -DFAVOR_EXAMPLES_DISPATCH=OFF \
        -DFAVOR_TEST_AVX512=OFF -DFAVOR_TEST_SYMBOLS=OFF -DFAVOR_TEST_LONG_RECURRENCE=OFF \
        -DFAVOR_TEST_CONCURRENT=OFF \
        "-DCMAKE_CROSSCOMPILING_EMULATOR=valgrind;--error-exitcode=99;--leak-check=full;--errors-for-leak-kinds=definite;--quiet" \
        >/dev/null
    cmake --build "$dir" -j"$jobs" >/dev/null
    # valgrind runs threads one at a time: OpenMP spinning would only burn time.
    # No thread tests (FAVOR_TEST_SKIP, test_threads_scalar): the scalar
    # variants have no OpenMP, so each compares a call with the same call made
    # again (test_backward_threads was a third of its suite's 346 s here, Xeon
    # Cascade Lake); the README step and the ASan job run them threaded.
    FAVOR_TEST_SKIP='*threads*' OMP_WAIT_POLICY=passive ctest --test-dir "$dir" --output-on-failure -j"$jobs" \
        -E 'favor_train_smoke|forced_|standalone_(exp|tanh)|interop|test_features_|test_threads_scalar|test_(backward|linear|threads|recurrent|decode|stress|batch|softmax|variants|gated|gated_bwd)_avx2|test_dtypes_scalar|test_backends_' \
        --timeout 1500
}

if [ $# -eq 0 ]; then set -- asan-gcc asan-clang valgrind tsan fuzz; fi
for job in "$@"; do
    case $job in
    asan-gcc) asan gcc ;;
    asan-clang) ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0 asan clang ;;
    valgrind) job_valgrind ;;
    tsan) sh tests/tsan/run.sh ;;
    fuzz) sh tests/fuzz/run.sh ;;
    *) echo "usage: sh tests/sanitizers.sh [asan-gcc|asan-clang|valgrind|tsan|fuzz]..." >&2; exit 2 ;;
    esac
done
echo "== sanitizers: $* passed"
