#!/bin/sh
# Which lines of include/favor.h no test reaches: clang source-based coverage of
# the native suite (every variant this CPU runs, examples included) and of the
# fuzz harness replaying a corpus. Not a CI job (9 minutes from scratch on 2
# cores, Xeon Emerald Rapids; 4 to rerun): run it when looking for untested code.
#
#   sh tests/coverage.sh                       # the suite, tests/fuzz/corpus and repro
#   FUZZ_CORPUS=/tmp/corpus sh tests/coverage.sh   # also replay a larger corpus
#
# Prints favor.h's line and function coverage for the suite, for the fuzz replay
# and for both together, and writes the lines neither reaches, grouped, with
# the function around them, to build/coverage/uncovered.txt.
#
# The header is compiled into each test binary, in different variants (scalar,
# AVX2, AVX-512, dispatch), and llvm-cov pairs one function's counters with one
# binary's mapping of it. Merged over every binary, code an OpenMP construct
# outlines can show as never run although it ran; taken binary by binary, some
# comment lines inside a function show as never run. A line is listed only
# when both views say it never ran.
#
# Needs clang and its profile tools (Debian: clang, llvm-14; libomp-14-dev for
# the threaded variants). The interop test is left out: it caps the file size
# to test favor-npy's write errors, which also stops the profile being written.
set -eu
cd "$(dirname "$0")/.."
root=$PWD
out=$root/build/coverage
jobs=${FAVOR_JOBS:-2}
hdr=$root/include/favor.h

pick() { # the first of the tools named that exists
    for t in "$@"; do
        if command -v "$t" >/dev/null 2>&1; then echo "$t"; return 0; fi
    done
    echo "tests/coverage.sh: ERROR: none of $* found (Debian: apt-get install llvm-14)" >&2
    exit 1
}
profdata=$(pick llvm-profdata-14 llvm-profdata)
cov=$(pick llvm-cov-14 llvm-cov)
command -v clang >/dev/null 2>&1 || { echo "tests/coverage.sh: ERROR: clang not found" >&2; exit 1; }

rm -rf "$out/prof" "$out/fprof" "$out/lcov" "$out/other"
mkdir -p "$out/prof" "$out/fprof" "$out/lcov" "$out/other"
# instrumented programs the build itself runs write here, not into the tree
LLVM_PROFILE_FILE="$out/other/%p-%m.profraw"
export LLVM_PROFILE_FILE
flags="-O1 -fprofile-instr-generate -fcoverage-mapping"

echo "== build the suite with coverage (clang $flags)"
CC=clang cmake -S . -B "$out/suite" -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS=$flags" \
    -DFAVOR_BUILD_BENCH=OFF -DFAVOR_TEST_SYMBOLS=OFF -DFAVOR_TEST_LONG_RECURRENCE=OFF \
    -DFAVOR_TEST_CONCURRENT=OFF >"$out/configure.log"
cmake --build "$out/suite" -j"$jobs" >"$out/build.log"

echo "== run the suite"
LLVM_PROFILE_FILE="$out/prof/%p-%m.profraw" OMP_WAIT_POLICY=passive \
    ctest --test-dir "$out/suite" -j"$jobs" -E '^interop_torch$' >"$out/ctest.log" 2>&1 || {
    tail -n 20 "$out/ctest.log" >&2
    echo "tests/coverage.sh: ERROR: a test failed (log: $out/ctest.log)" >&2
    exit 1
}

echo "== replay the fuzz corpus (AVX-512 where the CPU has it, else AVX2; and scalar)"
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
    wide="-mavx512f -mavx512dq -mavx512bw -mavx512vl -mfma -mf16c"
else
    wide="-mavx2 -mfma -mf16c"
fi
corpora="tests/fuzz/corpus tests/fuzz/repro ${FUZZ_CORPUS:-}"
for v in wide scalar; do
    if [ $v = wide ]; then vf=$wide; else vf=-DFAVOR_NO_SIMD; fi
    # shellcheck disable=SC2086
    clang -std=c99 $flags $vf -Iinclude tests/fuzz/favor_fuzz.c tests/fuzz/replay_main.c -lm \
        -o "$out/replay_$v"
    # shellcheck disable=SC2086
    LLVM_PROFILE_FILE="$out/fprof/$v.profraw" "$out/replay_$v" $corpora >"$out/replay_$v.log" 2>&1 || {
        tail -n 5 "$out/replay_$v.log" >&2
        echo "tests/coverage.sh: ERROR: the $v replay failed" >&2
        exit 1
    }
done

"$profdata" merge -sparse "$out"/prof/*.profraw -o "$out/suite.profdata"
"$profdata" merge -sparse "$out"/fprof/*.profraw -o "$out/fuzz.profdata"
"$profdata" merge -sparse "$out/suite.profdata" "$out/fuzz.profdata" -o "$out/all.profdata"

# the binaries: the suite's executables, then the two replays
find "$out/suite" -maxdepth 1 -type f -perm -u+x | sort >"$out/objects.txt"
printf '%s\n' "$out/replay_wide" "$out/replay_scalar" >>"$out/objects.txt"
objargs() { # the first binary plain, the rest as -object=
    sed '1!s/^/-object=/' "$1" | tr '\n' ' '
}
summary() { # $1 label, $2 profile, $3 list of binaries
    # shellcheck disable=SC2046
    "$cov" report $(objargs "$3") -instr-profile="$2" "$hdr" 2>/dev/null |
        awk -v l="$1" '$1 == "TOTAL" { printf "== %-22s lines %s of %s (%s), functions %s of %s\n", l, $8 - $9, $8, $10, $5 - $6, $5 }'
}
grep -v '/replay_' "$out/objects.txt" >"$out/objects_suite.txt"
grep '/replay_' "$out/objects.txt" >"$out/objects_fuzz.txt"
summary "the suite:" "$out/suite.profdata" "$out/objects_suite.txt"
summary "the fuzz replay:" "$out/fuzz.profdata" "$out/objects_fuzz.txt"
summary "both:" "$out/all.profdata" "$out/objects.txt"

# lines with a count, never run: merged over every binary, and binary by binary
zero_lines() { # lcov on stdin -> the header's lines whose counts sum to 0
    awk -F'[:,]' -v h="$hdr" '/^SF:/ { on = ($2 == h) }
        on && /^DA:/ { seen[$2] = 1; c[$2] += $3 }
        END { for (l in seen) if (c[l] == 0) print l }' | sort -n
}
# shellcheck disable=SC2046
"$cov" export $(objargs "$out/objects.txt") -instr-profile="$out/all.profdata" -format=lcov \
    "$hdr" 2>/dev/null | zero_lines >"$out/zero_merged.txt"
i=0
while read -r obj; do
    i=$((i + 1))
    "$cov" export "$obj" -instr-profile="$out/all.profdata" -format=lcov "$hdr" 2>/dev/null \
        >"$out/lcov/$i.info"
done <"$out/objects.txt"
cat "$out"/lcov/*.info | zero_lines >"$out/zero_each.txt"
sort "$out/zero_merged.txt" >"$out/a.tmp"
sort "$out/zero_each.txt" >"$out/b.tmp"
comm -12 "$out/a.tmp" "$out/b.tmp" | sort -n >"$out/zero.txt"
rm -f "$out/a.tmp" "$out/b.tmp"

# grouped (lines at most 2 apart), each group under the function that holds it;
# preprocessor lines (the renaming #defines of the dispatch build, an #endif)
# are mapping artifacts, not code, and are left out
awk 'NR == FNR { z[$1] = 1; next }
     /^(static|FAVOR__DEF|FAVOR_API)/ { fn = $0 }
     { src[FNR] = $0; owner[FNR] = fn }
     END {
         last = -10
         for (l = 1; l <= FNR; ++l) {
             if (!(l in z) || src[l] ~ /^[ \t]*#/) continue
             if (l > last + 2) printf "\n-- line %d, in: %s\n", l, substr(owner[l], 1, 100)
             printf "%6d  %s\n", l, src[l]
             last = l
             ++n
         }
         printf "%d\n", n > "/dev/stderr"
     }' "$out/zero.txt" "$hdr" >"$out/uncovered.txt" 2>"$out/uncovered.count"
echo "== $(cat "$out/uncovered.count") lines of favor.h never ran: $out/uncovered.txt"
