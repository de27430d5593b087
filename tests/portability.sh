#!/bin/sh
# The portability matrix (run by .ci/run; each job can be run alone):
#
#   sh tests/portability.sh opt        gcc at -O0, -O3 (and -O2 with FAVOR_OPT_O2=1: CI
#                                      builds -O2 with -Werror in the README step) and
#                                      clang at -O3, -Werror: build; ctest at gcc -O0,
#                                      gcc -O3 and clang -O3; scalar and one SIMD
#                                      variant (tests/simd_variant.sh)
#   sh tests/portability.sh pedantic   the header alone, -std=c99 -pedantic -Werror
#                                      -Wall -Wextra, gcc and clang, every x86 backend
#                                      (AVX-512 too, on any CPU: compile only)
#   sh tests/portability.sh cxx        the header as C++11 (g++, clang++, -Werror):
#                                      tests/cxx/cxx_smoke.cpp, scalar and AVX2, run
#   sh tests/portability.sh m32        32-bit x86 (gcc -m32): build, ctest (scalar, AVX2;
#                                      under qemu-i386 where the kernel runs no i386
#                                      binaries, the 32-bit subset named in job_m32;
#                                      no AVX-512 variant)
#   sh tests/portability.sh cortex-m4  arm-none-eabi-gcc, Cortex-M4 hard float, scalar,
#                                      FAVOR_NO_MALLOC: compile, link, report code size
#   sh tests/portability.sh s390x      big-endian: gcc-s390x-linux-gnu, -Werror, the
#                                      scalar suite and examples under qemu-s390x
#                                      (not in .ci/run: about 11 minutes, most of it emulation)
#
# AArch64 (NEON and forced scalar, under qemu) is the second half of
# tests/run_all.sh. Prerequisites beyond the README's: gcc-multilib and
# libcmocka-dev:i386 (m32; gcc-multilib conflicts with gcc-aarch64-linux-gnu on
# Debian, so .ci/run installs it last), gcc-arm-none-eabi and
# libnewlib-arm-none-eabi (cortex-m4); gcc-s390x-linux-gnu, libc6-dev-s390x-cross
# and, after dpkg --add-architecture s390x, libcmocka-dev:s390x (s390x). Build
# trees go to build/portability/.
set -eu
cd "$(dirname "$0")/.."
jobs=${FAVOR_JOBS:-2}
out=build/portability
mkdir -p "$out"

. tests/simd_variant.sh

job_opt() {
    # gcc at three levels: some of its warnings come from its optimizers (inlining,
    # -Wmaybe-uninitialized, -Wstringop-*) and differ by level. clang diagnoses in
    # its front end, the same at every level: it builds at -O3 only (on a Zen 3,
    # builds were most of this step's 19 minutes, six of them before).
    # gcc -O2 is the Release default, the README step's build; .ci/run builds it
    # with -Werror there (FAVOR_WERROR=ON sh tests/run_all.sh), and FAVOR_OPT_O2=1
    # adds it here for a run of this job alone.
    for cc in gcc clang; do
        levels="O0 O3"
        if [ "${FAVOR_OPT_O2:-0}" = 1 ]; then levels="O0 O2 O3"; fi
        if [ "$cc" = clang ]; then levels="O3"; fi
        for opt in $levels; do
            echo "== $cc -$opt -Werror: build (and test)"
            dir=$out/$cc-$opt
            # FAVOR_DISPATCH (three copies of the library per program) is built
            # and run here at clang -O3 only (the suite's dispatch variant and
            # test_dispatch_bits): the README step does the same, with the examples,
            # with gcc -O2, and the pedantic and C++ jobs compile it at -O0 and
            # -O2. The other levels build the examples with -march=native.
            # tests/symbols/check.sh depends on the compiler alone, not on the
            # level: it runs at clang -O3 here (gcc: the README step).
            # At clang -O3 the examples are built plainly (scalar), not dispatched:
            # four more dispatched copies of the library, 200 of the 690 CPU
            # seconds of this build (Xeon Cascade Lake), for what the suite's
            # dispatch variant and test_dispatch_bits run here already.
            # At every level, no 10^7-token recurrence (its own copy of the
            # library, 47 s to compile at gcc -O3; the README step and the m32
            # job run it) and no tsan_concurrent (the README step runs it, the
            # TSan job races it).
            native=ON
            dispatch=OFF
            symbols=OFF
            if [ "$cc-$opt" = clang-O3 ]; then native=OFF dispatch=ON symbols=ON; fi
            # shellcheck disable=SC2046
            CC=$cc cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release \
                "-DCMAKE_C_FLAGS_RELEASE=-$opt" -DFAVOR_WERROR=ON -DFAVOR_BUILD_BENCH=OFF \
                -DFAVOR_NATIVE=$native -DFAVOR_EXAMPLES_DISPATCH=OFF \
                -DFAVOR_TEST_DISPATCH=$dispatch -DFAVOR_TEST_SYMBOLS=$symbols \
                -DFAVOR_TEST_LONG_RECURRENCE=OFF -DFAVOR_TEST_CONCURRENT=OFF \
                $(favor_simd_variant_options) >/dev/null
            cmake --build "$dir" -j"$jobs" >/dev/null
            # Every level is built with -Werror; the suite runs at gcc -O0, gcc -O3
            # and clang -O3 (the README step runs it at gcc -O2, the CMakeLists'
            # Release default). At -O0 the two suites that were longest,
            # test_backward and test_linear (their float64 references), and
            # test_features (statistics over thousands of feature maps drawn)
            # are left out, and so are the scalar variants and
            # favor_train_smoke (191 of the 292 CPU seconds left on a Zen 3):
            # what -O0 changes is the SIMD variant's code, vector values spilled
            # to the stack and passed between functions not inlined; plain C at
            # -O0 is the same C the other levels and UBSan run. The README step,
            # gcc and clang -O3 and the ASan job run these, and -O0
            # changes no kernel's order of operations.
            case $cc-$opt in
            gcc-O2) echo "built; tests: the README step"; continue ;;
            esac
            skip=""
            if [ "$opt" = O0 ]; then skip="-E ^(favor_train_smoke|test_(backward|linear|features)_.*|.*_scalar)$"; fi
            if ! ctest --test-dir "$dir" --output-on-failure -j"$jobs" $skip > "$dir/ctest.log" 2>&1; then
                cat "$dir/ctest.log"
                exit 1
            fi
            tail -n 3 "$dir/ctest.log"
        done
    done
}

# both_at_once F A B: the shell function F run twice at once, F A in the
# background and F B in the foreground, each into a log of its own, printed
# after; fails when either fails. (The compile-only jobs are serial compiles of
# the whole header, one at a time: one per core halves their time.) F stops at
# its first failure itself (`|| return 1`): set -e does not apply inside a
# command whose status is tested.
both_at_once() {
    f=$1 a=$2 b=$3
    "$f" "$a" > "$out/$f-$a.log" 2>&1 &
    pid=$!
    st_b=0
    "$f" "$b" > "$out/$f-$b.log" 2>&1 || st_b=$?
    st_a=0
    wait "$pid" || st_a=$?
    cat "$out/$f-$a.log" "$out/$f-$b.log"
    [ "$st_a" = 0 ] && [ "$st_b" = 0 ]
}

pedantic_cc() { # $1 compiler
    for std in c99 c11; do
        for backend in "-DFAVOR_NO_SIMD" "-mavx2 -mfma" "-DFAVOR_STATIC -mavx2 -mfma -mf16c" \
            "-mavx512f -mfma" "-DFAVOR_STATIC -mavx512f -mavx512dq -mavx512bw -mavx512vl -mfma" \
            "-DFAVOR_DISPATCH" "-DFAVOR_STATIC -DFAVOR_DISPATCH -fopenmp"; do
            echo "== $1 -std=$std -pedantic -Werror -Wall -Wextra $backend"
            # shellcheck disable=SC2086
            $1 -std=$std -pedantic -Werror -Wall -Wextra -Wshadow -Wstrict-prototypes \
                -Wmissing-prototypes -Wcast-qual -Wundef $backend -Iinclude \
                -c "$out/impl.c" -o "$out/impl-$1.o" || return 1
        done
    done
}

job_pedantic() {
    printf '#define FAVOR_IMPLEMENTATION\n#include "favor.h"\n' > "$out/impl.c"
    both_at_once pedantic_cc gcc clang
}

cxx_smoke() { # $1 compiler
    for std in c++11 c++17; do
        for backend in "-DFAVOR_NO_SIMD" "-mavx2 -mfma"; do
            echo "== $1 -std=$std -Werror $backend: tests/cxx/cxx_smoke.cpp"
            # shellcheck disable=SC2086
            $1 -std=$std -O2 -Wall -Wextra -pedantic -Werror $backend -Iinclude \
                tests/cxx/cxx_smoke.cpp -o "$out/cxx_smoke-$1" || return 1
            "$out/cxx_smoke-$1" || return 1
        done
    done
    # FAVOR_DISPATCH compiled as C++ (its AVX-512 pass: g++ 12 warns
    # uninitialized inside its own avx512fintrin.h (_mm512_undefined_*), as for a
    # static -mavx512f build; the C jobs keep the warning on)
    quiet=""
    if [ "$1" = g++ ]; then quiet="-Wno-uninitialized -Wno-maybe-uninitialized"; fi
    echo "== $1 $quiet -std=c++11 -Werror -DFAVOR_DISPATCH: tests/cxx/cxx_smoke.cpp"
    # shellcheck disable=SC2086
    $1 $quiet -std=c++11 -O2 -Wall -Wextra -pedantic -Werror -DFAVOR_DISPATCH -Iinclude \
        tests/cxx/cxx_smoke.cpp -o "$out/cxx_smoke-$1" || return 1
    "$out/cxx_smoke-$1"
}

job_cxx() {
    both_at_once cxx_smoke g++ clang++
}

job_m32() {
    echo "== gcc -m32: build and test (i386 ABI: scalar and AVX2 variants)"
    dir=$out/m32
    mkdir -p "$dir"
    # Some x86-64 kernels do not exec i386 binaries (seen on one CI machine:
    # ENOEXEC for every test). There the same binaries run under qemu-i386
    # (Debian's qemu-user), as the AArch64 ones run under qemu-aarch64.
    # FAVOR_M32_EMULATE=1 takes that path on any machine.
    printf 'int main(void) { return 0; }\n' > "$out/m32_probe.c"
    gcc -m32 "$out/m32_probe.c" -o "$out/m32_probe"
    emulator=""
    if [ "${FAVOR_M32_EMULATE:-0}" = 1 ] || ! "$out/m32_probe" 2>/dev/null; then
        emulator=$(command -v qemu-i386) || {
            echo "m32: this kernel cannot run i386 binaries and qemu-i386 is missing (apt-get install qemu-user)" >&2
            exit 1
        }
        "$emulator" "$out/m32_probe"
        echo "m32: this kernel does not run i386 binaries: the tests run under $emulator"
    fi
    CC=gcc cmake -S . -B "$dir" -DCMAKE_TOOLCHAIN_FILE=cmake/i386-m32.cmake \
        -DFAVOR_WERROR=ON -DFAVOR_BUILD_BENCH=OFF -DFAVOR_TEST_AVX512=OFF -DFAVOR_TEST_SYMBOLS=OFF ${emulator:+"-DCMAKE_CROSSCOMPILING_EMULATOR=$emulator"}
    cmake --build "$dir" -j"$jobs"
    file "$dir/test_softmax_scalar" 2>/dev/null || true
    # the AVX2 variant is dropped when its configure-time probe cannot run: not here
    if grep -qw avx2 /proc/cpuinfo && [ ! -x "$dir/test_softmax_avx2" ]; then
        echo "m32: the CPU has AVX2 but the AVX2 variant was not built" >&2
        exit 1
    fi
    if [ -z "$emulator" ]; then
        ctest --test-dir "$dir" --output-on-failure -j"$jobs"
    else
        # qemu-i386 runs the scalar variant's x87 arithmetic some 100x slower
        # than a native i386 process (CI, Zen 5 VM, 2026-11-26: test_linear_scalar
        # 1011 s, test_backends_avx2 186 s; the whole suite did not finish in 70
        # minutes). Emulated, the job runs the suites that reach what 32-bit x86
        # changes and the 64-bit jobs cannot: a 32-bit size_t in every size and
        # overflow check (test_validation), 4-byte malloc alignment and the
        # workspace arithmetic (standalone_alloc, standalone_nomalloc, test_merge,
        # test_fused, test_softmax, test_batch), the 16-bit conversions, and x87
        # excess precision against the bit-identity claims (standalone_convert,
        # standalone_tanh, test_variants), scalar and AVX2 each; and the header
        # in several translation units. The other suites run the same kernels
        # on x86-64 natively in every other job.
        echo "m32: under qemu-i386: the 32-bit subset (see tests/portability.sh)"
        ctest --test-dir "$dir" --output-on-failure -j"$jobs" --timeout 600 \
            -R '^(test_(validation|merge|fused|softmax|batch|variants)|standalone_(alloc|nomalloc|convert|tanh))_(scalar|avx2)$|^symbols_'
    fi
}

job_s390x() {
    # Every other job runs on a little-endian CPU. The library reads no float
    # through bytes (16-bit conversions and the sampler work on whole words), and
    # this job is the check: the scalar suite, the examples and favor_attention_layer's
    # float64 check on big-endian s390x (2026-11-30: all pass; it found a test that
    # hashed W's bytes in memory order). No thread tests: the cross build has no
    # OpenMP, so each would compare a call with the same call made again.
    # favor_npy's byte-order handling is checked by the interop test, natively.
    echo "== s390x (big-endian) -Werror: build and test under qemu-s390x"
    dir=$out/s390x
    cmake -S . -B "$dir" -DCMAKE_TOOLCHAIN_FILE=cmake/s390x-linux-gnu.cmake \
        -DCMAKE_BUILD_TYPE=Release -DFAVOR_WERROR=ON -DFAVOR_BUILD_BENCH=OFF >/dev/null
    cmake --build "$dir" -j"$jobs" >/dev/null
    file "$dir/test_softmax_scalar" 2>/dev/null || true
    FAVOR_TEST_SKIP='*threads*' ctest --test-dir "$dir" --output-on-failure -j"$jobs" \
        --timeout 1800
}

job_cortex_m4() {
    echo "== arm-none-eabi-gcc -mcpu=cortex-m4 -mfloat-abi=hard, scalar, FAVOR_NO_MALLOC"
    flags="-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16 -Os -ffunction-sections -fdata-sections"
    # shellcheck disable=SC2086
    arm-none-eabi-gcc -std=c99 -pedantic -Wall -Wextra -Werror $flags -Iinclude \
        -c tests/cortex_m4.c -o "$out/cortex_m4.o"
    # shellcheck disable=SC2086
    arm-none-eabi-gcc $flags --specs=nosys.specs -Wl,--gc-sections \
        "$out/cortex_m4.o" -lm -o "$out/cortex_m4.elf"
    # the library alone: every entry point, no caller
    printf '#define FAVOR_NO_SIMD\n#define FAVOR_NO_MALLOC\n#define FAVOR_IMPLEMENTATION\n#include "favor.h"\n' \
        > "$out/cortex_m4_lib.c"
    # shellcheck disable=SC2086
    arm-none-eabi-gcc -std=c99 -pedantic -Wall -Wextra -Werror $flags -Iinclude \
        -c "$out/cortex_m4_lib.c" -o "$out/cortex_m4_lib.o"
    arm-none-eabi-size "$out/cortex_m4_lib.o" "$out/cortex_m4.o" "$out/cortex_m4.elf"
    set -- $(arm-none-eabi-size "$out/cortex_m4_lib.o" | awk 'NR == 2 { print $1, $2, $3 }')
    echo "favor.h on Cortex-M4 (scalar, -Os): $1 bytes of code, $2 of data, $3 of bss"
    # no global state: the library's object has nothing in .data or .bss
    if [ "$2" != 0 ] || [ "$3" != 0 ]; then echo "cortex-m4: favor.h has static data" >&2; exit 1; fi
    # without the texts of opts.error
    # shellcheck disable=SC2086
    arm-none-eabi-gcc -std=c99 -pedantic -Wall -Wextra -Werror $flags -Iinclude \
        -DFAVOR_NO_ERROR_TEXT -c "$out/cortex_m4_lib.c" -o "$out/cortex_m4_lib_notext.o"
    set -- $(arm-none-eabi-size "$out/cortex_m4_lib_notext.o" | awk 'NR == 2 { print $1, $2, $3 }')
    echo "the same with FAVOR_NO_ERROR_TEXT: $1 bytes of code, $2 of data, $3 of bss"
    # the same program on the host, run: every call returns FAVOR_OK
    cc -std=c99 -Wall -Wextra -Werror -Iinclude tests/cortex_m4.c -lm -o "$out/cortex_m4_host"
    "$out/cortex_m4_host"
}

if [ $# -eq 0 ]; then set -- opt pedantic cxx; fi
for job in "$@"; do
    case $job in
    opt) job_opt ;;
    pedantic) job_pedantic ;;
    cxx) job_cxx ;;
    m32) job_m32 ;;
    cortex-m4) job_cortex_m4 ;;
    s390x) job_s390x ;;
    *) echo "usage: sh tests/portability.sh [opt|pedantic|cxx|m32|cortex-m4|s390x]..." >&2; exit 2 ;;
    esac
done
echo "== portability: $* passed"
