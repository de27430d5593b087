#!/bin/sh
# Time two or more versions of favor.h in one process (bench/README.md,
# "Comparing two versions of the header"):
#
#   sh bench/favor_ab.sh [favor_ab options] VERSION... -- CASE...
#
# VERSION: a path to a favor.h, or a git revision of this repository (its
# include/favor.h); CASE and the options (--rounds R, --min-ms M, --expect-same,
# --kv-offset B): see bench/favor_ab.c. Each version is compiled with
# bench/favor_ab_lib.c into a shared object in $FAVOR_AB_DIR (default build/ab) with
# ${CC:-cc} $FAVOR_AB_CFLAGS (default -O2 -march=native) -fopenmp, then
# favor_ab times them. Example: the working tree's header against the last
# commit's, one fp16 decode row and 4 rows on 32 query heads on 8:
#
#   OMP_WAIT_POLICY=passive sh bench/favor_ab.sh HEAD include/favor.h -- \
#       decode:16384:64:f16:8/8:1:1 decode:16384:64:f16:32/8:4:1
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
dir=${FAVOR_AB_DIR:-build/ab}
cc=${CC:-cc}
cflags=${FAVOR_AB_CFLAGS:--O2 -march=native}
omp=-fopenmp
if ! printf 'int main(void){return 0;}\n' | $cc $omp -x c - -o /dev/null 2>/dev/null; then
    echo "favor_ab.sh: $cc has no -fopenmp: every call runs on one thread"
    omp=
fi
mkdir -p "$dir"

opts=""
while [ $# -gt 0 ]; do
    case $1 in
    --rounds | --min-ms | --kv-offset) opts="$opts $1 $2"; shift 2 ;;
    --expect-same) opts="$opts $1"; shift ;;
    *) break ;;
    esac
done

libs=""
n=0
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    v=$1
    shift
    src="$dir/v$n"
    mkdir -p "$src"
    if [ -f "$v" ]; then
        cp "$v" "$src/favor.h"
    elif git -C "$root" rev-parse --verify -q "$v^{commit}" >/dev/null; then
        git -C "$root" show "$v:include/favor.h" > "$src/favor.h"
    else
        echo "favor_ab.sh: '$v' is neither a file nor a git revision" >&2
        exit 2
    fi
    echo "[$n] $v: compiling"
    # shellcheck disable=SC2086
    $cc $cflags $omp -fPIC -shared -I"$src" -I"$here" "$here/favor_ab_lib.c" \
        -o "$dir/v$n.so" -lm
    libs="$libs $dir/v$n.so"
    n=$((n + 1))
done
if [ $n -lt 1 ] || [ $# -lt 2 ]; then
    echo "usage: sh bench/favor_ab.sh [options] VERSION... -- CASE..." >&2
    exit 2
fi
# shellcheck disable=SC2086
$cc -O2 -o "$dir/favor_ab" "$here/favor_ab.c" -ldl -lm
# shellcheck disable=SC2086
exec "$dir/favor_ab" $opts $libs "$@"
