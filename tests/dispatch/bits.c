/* FAVOR_DISPATCH against the static builds (issue: one build that runs the best
 * backend the CPU has). This file is the dispatched copy of favor.h, compiled
 * without any -m flag; tests/dispatch/static_tu.c is compiled once per target
 * with that target's flags. For each target this CPU runs, the dispatched build
 * forced to it must give the static build's results bit for bit, over every
 * computing entry point (tests/dispatch/battery.h). Also checked:
 *   - the targets favor_set_backend accepts are exactly those cpuid reports
 *     (gcc's and clang's __builtin_cpu_supports) and the OS saves the state of;
 *   - an unknown name, or a target the CPU lacks, is FAVOR_E_ARG and changes
 *     nothing; NULL chooses the best target, as the first call does by itself;
 *   - the targets really differ: scalar and AVX2 round differently, so equal
 *     hashes there would mean the dispatch ran one copy for both. */
#define FAVOR_IMPLEMENTATION
#define FAVOR_DISPATCH
#include "favor.h"
#include "battery.h"

#include <stdio.h>

const char *db_static_scalar(uint64_t *hash, unsigned *errors);
const char *db_static_avx2(uint64_t *hash, unsigned *errors);
const char *db_static_avx512(uint64_t *hash, unsigned *errors);

static int failures;
#define CHECK(c, ...)                                                                  \
    do {                                                                               \
        if (!(c)) {                                                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                \
            printf(__VA_ARGS__);                                                       \
            printf("\n");                                                              \
            ++failures;                                                                \
        }                                                                              \
    } while (0)

int main(void)
{
    static const char *const names[3] = {"scalar", "avx2", "avx512"};
    const char *(*const statics[3])(uint64_t *, unsigned *) = {db_static_scalar, db_static_avx2,
                                                              db_static_avx512};
    int cpu[3], i, best = 0;
    uint64_t hd[3] = {0, 0, 0};
    const char *first;

    __builtin_cpu_init();
    cpu[0] = 1;
    cpu[1] = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    cpu[2] = cpu[1] && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    for (i = 0; i < 3; ++i)
        if (cpu[i]) best = i;

    /* the first call chooses by itself */
    first = favor_backend();
    printf("first call runs %s; this CPU runs:%s%s%s\n", first, " scalar", cpu[1] ? " avx2" : "",
           cpu[2] ? " avx512" : "");
    CHECK(strcmp(first, names[best]) == 0, "the first call ran %s, the best here is %s", first,
          names[best]);

    for (i = 0; i < 3; ++i) {
        favor_status st = favor_set_backend(names[i]);
        if (!cpu[i]) {
            CHECK(st == FAVOR_E_ARG, "forcing %s, which this CPU lacks, returned %d", names[i],
                  (int)st);
            CHECK(strcmp(favor_backend(), names[i]) != 0, "%s was chosen all the same", names[i]);
            printf("%-7s not on this CPU: refused\n", names[i]);
            continue;
        }
        CHECK(st == FAVOR_OK, "forcing %s returned %d", names[i], (int)st);
        CHECK(strcmp(favor_backend(), names[i]) == 0, "forced %s, runs %s", names[i],
              favor_backend());
        {
            uint64_t hs;
            unsigned ed, es;
            const char *sb;
            hd[i] = db_battery(&ed);
            sb = statics[i](&hs, &es);
            printf("%-7s dispatched %016llx, static (%s) %016llx\n", names[i],
                   (unsigned long long)hd[i], sb, (unsigned long long)hs);
            CHECK(strcmp(sb, names[i]) == 0, "the static %s copy is %s", names[i], sb);
            CHECK(ed == 0 && es == 0, "%u (dispatched) and %u (static) calls failed", ed, es);
            CHECK(hd[i] == hs, "%s: dispatched and static results differ", names[i]);
        }
    }
    if (cpu[1]) CHECK(hd[0] != hd[1], "scalar and avx2 gave the same bits");

    CHECK(favor_set_backend("neon") == FAVOR_E_ARG, "neon accepted on x86-64");
    CHECK(favor_set_backend("") == FAVOR_E_ARG, "an empty name accepted");
    CHECK(favor_set_backend("AVX2") == FAVOR_E_ARG, "names are lower case");
    CHECK(favor_set_backend("scalar") == FAVOR_OK && strcmp(favor_backend(), "scalar") == 0,
          "scalar not forced");
    CHECK(favor_set_backend(NULL) == FAVOR_OK && strcmp(favor_backend(), names[best]) == 0,
          "NULL chose %s, not %s", favor_backend(), names[best]);
    printf("%s\n", failures ? "FAILED" : "passed");
    return failures != 0;
}
