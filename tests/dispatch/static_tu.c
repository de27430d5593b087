/* One statically compiled copy of favor.h for tests/dispatch/bits.c: the
 * target comes from the compile flags (CMake builds this file once per target,
 * with the flags of that target's test variant), the entry point's name from
 * DB_RUN. FAVOR_STATIC keeps the copy's favor_ functions private to this file. */
#define FAVOR_STATIC
#define FAVOR_IMPLEMENTATION
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#include "favor.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#include "battery.h"

const char *DB_RUN(uint64_t *hash, unsigned *errors);
const char *DB_RUN(uint64_t *hash, unsigned *errors)
{
    *hash = db_battery(errors);
    return favor_backend();
}
