/* tests/symbols: links tu_extern.c (the extern implementation, favor.h included
 * four times) and tu_static.c (a FAVOR_STATIC private copy) into one program
 * (a duplicate symbol would fail the link), calls the public API from this
 * third file through the plain header, and checks that
 *   - the extern favor_backend seen here is the one tu_extern.c defines, and
 *     tu_static.c's favor_backend is a different (private) function;
 *   - both copies compute the same results bit for bit (same compiler, same
 *     flags, same backend). */
#include <stdio.h>
#include <string.h>

#include "favor.h"
#include "symbols.h"

int main(void)
{
    static float a[2 * SYMBOLS_ROWS * SYMBOLS_DV], b[2 * SYMBOLS_ROWS * SYMBOLS_DV];
    int ra = tu_extern_run(a), rb = tu_static_run(b), fails = 0;
    if (ra != 0 || rb != 0) {
        fprintf(stderr, "symbols: tu_extern_run %d, tu_static_run %d\n", ra, rb);
        return 1;
    }
    if (tu_extern_backend() != favor_backend) {
        fprintf(stderr, "symbols: main's favor_backend is not tu_extern.c's\n");
        ++fails;
    }
    if (tu_static_backend() == favor_backend) {
        fprintf(stderr, "symbols: tu_static.c's favor_backend is the extern one (FAVOR_STATIC "
                        "did not make it private)\n");
        ++fails;
    }
    if (strcmp(tu_static_backend()(), favor_backend()) != 0) {
        fprintf(stderr, "symbols: backends differ: %s and %s\n", tu_static_backend()(),
                favor_backend());
        ++fails;
    }
    if (memcmp(a, b, sizeof a) != 0) {
        fprintf(stderr, "symbols: the extern and the static copy disagree\n");
        ++fails;
    }
    printf("symbols: extern and FAVOR_STATIC copies linked together, backend %s, "
           "results bit-identical: %s\n", favor_backend(), fails ? "NO" : "yes");
    return fails ? 1 : 0;
}
