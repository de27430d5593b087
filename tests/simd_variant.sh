# Sourced by tests/sanitizers.sh and tests/portability.sh (POSIX sh). The jobs
# that build and run the whole suite again (ASan/UBSan, the optimisation
# levels) take one x86 SIMD variant: avx512 where /proc/cpuinfo lists avx512f,
# instead of avx2, not beside it (a third variant would cost each job a build
# and a run of the suite); avx2 elsewhere, where the avx512 variant could only
# be built (the README step's build compiles it there). The AVX2 vocabulary on an
# AVX-512 CPU runs in the README step and the valgrind job.
favor_simd_variant_options() {
    if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
        echo "-DFAVOR_TEST_AVX2=OFF"
    else
        echo "-DFAVOR_TEST_AVX512=OFF"
    fi
}
