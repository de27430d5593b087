#!/bin/sh
# Build and run the whole test suite on every backend this machine can run:
#   build/          native: forced scalar, AVX2+FMA where the CPU has it, and
#                   AVX-512 (run where the CPU has AVX-512F, else built only:
#                   one skipped test, avx512_built_not_run, says so)
#   build-aarch64/  cross-compiled for AArch64: NEON and forced scalar, run under
#                   qemu; of the scalar variant, the suites that repeat x86-64's
#                   scalar run at length (backward, linear, features, dtypes,
#                   backends, decode, threads, recurrent, stress, variants, the
#                   gated pair and the exp sweep) are built and left to the
#                   native run, and so are the thread tests (no OpenMP here)
# Prerequisites: see README.md. Usage: sh tests/run_all.sh
# FAVOR_WERROR=ON in the environment builds both with -Werror (CI does: these
# are its gcc -O2 and AArch64 -Werror builds).
set -eu
cd "$(dirname "$0")/.."
jobs=${FAVOR_JOBS:-2}
werror=${FAVOR_WERROR:+-DFAVOR_WERROR=$FAVOR_WERROR}

echo "== native build (scalar + the SIMD backends of this CPU)"
# shellcheck disable=SC2086
cmake -S . -B build $werror
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== AArch64 build (NEON + scalar) under qemu-aarch64"
# shellcheck disable=SC2086
cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
      -DFAVOR_BUILD_EXAMPLES=OFF -DFAVOR_BUILD_BENCH=OFF $werror
cmake --build build-aarch64 -j"$jobs"
# Built without OpenMP (libgomp crawls under qemu-user), so no thread tests:
# each would compare a call with the same call made again (FAVOR_TEST_SKIP
# skips the suites' thread tests; test_threads is left out).
FAVOR_TEST_SKIP='*threads*' ctest --test-dir build-aarch64 --output-on-failure -j"$jobs" \
      -E '^(test_(backward|linear|features|dtypes|backends|decode|threads|recurrent|stress|variants|gated|gated_bwd)|standalone_exp)_scalar$|^test_threads_neon$'
