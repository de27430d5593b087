#!/bin/sh
# Adoption paths, each from a clean directory under $TMPDIR:
#   1. install: `cmake --install` into a prefix, then a project that does
#      find_package(favor CONFIG REQUIRED) + favor::favor, and the same program
#      built by a bare cc with pkg-config's flags;
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
