#!/bin/sh
# Symbol hygiene of favor.h (issue 7, item 5). Usage, from anywhere:
#     CC=cc [NM=nm] sh tests/symbols/check.sh
# For each set of flags below, compiles a file that only defines
# FAVOR_IMPLEMENTATION and includes favor.h, and checks with
# `nm -g --defined-only` that
#   - every exported symbol starts with favor_ and none with favor__ (the
#     private prefix: private helpers must be static), and the public API is
#     there (favor_softmax_attention, favor_linear_step, favor_set_backend);
#   - the same with FAVOR_STATIC exports nothing at all.
# Also for FAVOR_DISPATCH without -m flags (x86-64 only: elsewhere the header
# ignores it), where every target's copy of the implementation (favor__x_scalar,
# favor__x_avx2, favor__x_avx512) must be static too, and the object must hold
# all three targets' tables (locals; else the dispatch was not compiled in).
# Then builds tests/symbols/{tu_extern,tu_static,main}.c into one program with
# -Wall -Wextra -pedantic -Werror (favor.h included twice plainly, once with
# FAVOR_IMPLEMENTATION and once more after; plus a FAVOR_STATIC copy in a
# second file) and runs it: the link proves there are no duplicate symbols.
# The symbols are listed on failure. A flag set the compiler does not accept
# (-mavx2 on a non-x86 compiler, -fopenmp without libgomp) is reported and
# skipped; the default ones must work. POSIX sh; ELF nm output.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
inc=$here/../../include
CC=${CC:-cc}
NM=${NM:-nm}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT HUP INT TERM
fails=0

printf '#define FAVOR_IMPLEMENTATION\n#include "favor.h"\n' > "$tmp/impl.c"
printf '#define FAVOR_STATIC\n#define FAVOR_IMPLEMENTATION\n#include "favor.h"\n' > "$tmp/static.c"
printf 'int main(void) { return 0; }\n' > "$tmp/probe.c"

# check_flags NAME FLAGS...: the two objects compiled with FLAGS
check_flags() {
    name=$1
    shift
    before=$fails
    if ! $CC "$@" -c "$tmp/probe.c" -o "$tmp/probe.o" >/dev/null 2>&1; then
        echo "symbols: $name: $CC does not accept '$*', skipped"
        return 0
    fi
    if ! $CC -std=c99 "$@" -I"$inc" -c "$tmp/impl.c" -o "$tmp/impl.o"; then
        echo "FAIL: $name: favor.h with FAVOR_IMPLEMENTATION does not compile"
        fails=$((fails + 1))
        return 0
    fi
    $NM -g --defined-only "$tmp/impl.o" | awk 'NF >= 2 { print $NF }' | sort > "$tmp/exported"
    bad=$(grep -v '^favor_' "$tmp/exported" || true)
    private=$(grep '^favor__' "$tmp/exported" || true)
    count=$(wc -l < "$tmp/exported" | tr -d ' ')
    if [ -n "$bad" ]; then
        echo "FAIL: $name: exported symbols without the favor_ prefix:"
        echo "$bad" | sed 's/^/    /'
        fails=$((fails + 1))
    fi
    if [ -n "$private" ]; then
        echo "FAIL: $name: private favor__ symbols exported (they must be static):"
        echo "$private" | sed 's/^/    /'
        fails=$((fails + 1))
    fi
    for api in favor_softmax_attention favor_linear_step favor_status_string favor_set_backend; do
        if ! grep -qx "$api" "$tmp/exported"; then
            echo "FAIL: $name: $api is not exported (nm output not understood?)"
            fails=$((fails + 1))
        fi
    done
    if ! $CC -std=c99 "$@" -I"$inc" -c "$tmp/static.c" -o "$tmp/static.o"; then
        echo "FAIL: $name: favor.h with FAVOR_STATIC does not compile"
        fails=$((fails + 1))
        return 0
    fi
    leaked=$($NM -g --defined-only "$tmp/static.o" | awk 'NF >= 2 { print $NF }')
    if [ -n "$leaked" ]; then
        echo "FAIL: $name: FAVOR_STATIC still exports:"
        echo "$leaked" | sed 's/^/    /'
        fails=$((fails + 1))
    fi
    if [ "$fails" -eq "$before" ]; then
        echo "symbols: $name ($*): $count exported, all favor_ (none favor__); FAVOR_STATIC exports none"
    fi
}

check_flags "-O2" -O2
check_flags "-O0" -O0
# The sets below change what is compiled in, not how: at -O0 (gcc 12, AVX2, one
# copy of the library: 2.3 s against 15.4 s at -O2 on a Xeon Cascade Lake).
check_flags "scalar" -O0 -DFAVOR_NO_SIMD
check_flags "PIC" -O0 -fPIC
case $($CC -dumpmachine 2>/dev/null || echo unknown) in
x86_64* | amd64* | i?86*) check_flags "AVX2" -O0 -mavx2 -mfma ;;
esac
check_flags "OpenMP" -O0 -fopenmp
case $($CC -dumpmachine 2>/dev/null || echo unknown) in
x86_64* | amd64*)
    rm -f "$tmp/impl.o"
    check_flags "dispatch" -O0 -DFAVOR_DISPATCH # (-O0: the symbols are the same, the compile 5x faster)
    for t in scalar avx2 avx512; do
        if [ -f "$tmp/impl.o" ] && ! $NM "$tmp/impl.o" | grep -q " favor__dtable_$t\$"; then
            echo "FAIL: dispatch: no favor__dtable_$t in the object (FAVOR_DISPATCH not compiled in?)"
            fails=$((fails + 1))
        fi
    done
    ;;
*) echo "symbols: dispatch: not an x86-64 target ($($CC -dumpmachine 2>/dev/null || echo unknown)), skipped" ;;
esac

# the multi-TU program
if $CC -std=c99 -O2 -Wall -Wextra -pedantic -Werror -I"$inc" -I"$here" "$here/tu_extern.c" \
    "$here/tu_static.c" "$here/main.c" -o "$tmp/multi" -lm; then
    if ! "$tmp/multi"; then
        echo "FAIL: the multi-TU program"
        fails=$((fails + 1))
    fi
else
    echo "FAIL: tu_extern.c + tu_static.c + main.c do not compile and link together"
    fails=$((fails + 1))
fi

if [ "$fails" -ne 0 ]; then
    echo "symbols: $fails failure(s)"
    exit 1
fi
echo "symbols: passed"
