#!/bin/sh
# Adoption paths, each from a clean directory under $TMPDIR:
#   1. install: `cmake --install` into a prefix, then a project that does
#      find_package(favor CONFIG REQUIRED) + favor::favor, and the same program
#      built by a bare cc with pkg-config's flags; and the package installed
#      with -DFAVOR_DISPATCH=ON into a second prefix: the same find_package
#      project, no -m flags, must run the best backend the CPU has (x86-64:
#      avx512, avx2 or scalar by /proc/cpuinfo's flags);
#   2. vendoring: only include/favor.h copied next to a program, built by a bare cc.
# Usage: sh tests/consumer/run.sh   (from anywhere; needs cmake, cc, pkg-config)
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/favor-consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT
cc=${CC:-cc}

echo "== install into $work/prefix"
cmake -S "$src" -B "$work/build" -DFAVOR_BUILD_TESTS=OFF -DFAVOR_BUILD_EXAMPLES=OFF \
      -DFAVOR_BUILD_BENCH=OFF -DCMAKE_INSTALL_PREFIX="$work/prefix" > /dev/null
cmake --build "$work/build" > /dev/null
cmake --install "$work/build" > /dev/null
ls -R "$work/prefix" | sed 's/^/   /'

echo "== find_package(favor CONFIG REQUIRED) against the prefix"
cmake -S "$src/tests/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" > /dev/null
cmake --build "$work/consumer" > /dev/null
"$work/consumer/consumer"

echo "== FAVOR_DISPATCH=ON: install into $work/prefix-dispatch, find_package, no -m flags"
# the same build and consumer directories, reconfigured (favor_DIR: the new prefix)
cmake -S "$src" -B "$work/build" -DFAVOR_DISPATCH=ON -DCMAKE_INSTALL_PREFIX="$work/prefix-dispatch" > /dev/null
cmake --build "$work/build" > /dev/null
cmake --install "$work/build" > /dev/null
cmake -S "$src/tests/consumer" -B "$work/consumer" \
      -Dfavor_DIR="$work/prefix-dispatch/share/favor/cmake" > /dev/null
cmake --build "$work/consumer" > /dev/null
out=$("$work/consumer/consumer")
echo "$out"
backend=$(echo "$out" | sed -n 's/^consumer: favor\.h (\([a-z0-9]*\) backend).*/\1/p')
if [ "$(uname -m)" = x86_64 ] && [ -r /proc/cpuinfo ]; then
    # what favor.h's cpuid test accepts: AVX-512 F/DQ/BW/VL on top of AVX2+FMA+F16C
    cpuflags=" $(grep -m1 '^flags' /proc/cpuinfo | sed 's/^[^:]*://') "
    has() { for f in "$@"; do case $cpuflags in *" $f "*) ;; *) return 1 ;; esac; done; }
    want=scalar
    if has avx2 fma f16c; then
        want=avx2
        if has avx512f avx512dq avx512bw avx512vl; then want=avx512; fi
    fi
    if [ "$backend" != "$want" ]; then
        echo "FAIL: the FAVOR_DISPATCH consumer runs '$backend'; /proc/cpuinfo says '$want'" >&2
        exit 1
    fi
    echo "   backend $backend: the best /proc/cpuinfo lists"
else
    echo "   (not x86-64 Linux: backend $backend not checked)"
fi

echo "== pkg-config favor against the prefix"
flags=$(PKG_CONFIG_PATH="$work/prefix/share/pkgconfig" pkg-config --cflags --libs favor)
echo "   pkg-config --cflags --libs favor: $flags"
echo "   version: $(PKG_CONFIG_PATH="$work/prefix/share/pkgconfig" pkg-config --modversion favor)"
# shellcheck disable=SC2086
$cc -std=c99 -O2 -o "$work/consumer-pc" "$src/tests/consumer/consumer.c" $flags
"$work/consumer-pc"

echo "== vendoring: favor.h alone in an empty directory, a bare cc"
mkdir "$work/vendor"
cp "$src/include/favor.h" "$src/examples/readme_example.c" "$work/vendor/"
(cd "$work/vendor" && $cc -std=c99 -O2 -Wall -Wextra -o example readme_example.c -lm && ./example)
(cd "$work/vendor" && $cc -std=c99 -O2 -mavx2 -mfma -o example-avx2 readme_example.c -lm 2>/dev/null &&
 ./example-avx2 || echo "   (no AVX2 build on this compiler/CPU)")
echo "== adoption paths passed"
