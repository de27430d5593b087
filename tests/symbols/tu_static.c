/* Translation unit 2 of tests/symbols: a private copy of favor.h
 * (FAVOR_STATIC + FAVOR_IMPLEMENTATION), linked into the same program as
 * tu_extern.c's extern copy: every favor_ function here is static, so the two
 * copies cannot clash, and this file's calls go to its own copy. */
#define FAVOR_STATIC
#define FAVOR_IMPLEMENTATION
#include "favor.h"

#include "symbols.h"

int tu_static_run(float *out) { SYMBOLS_RUN_BODY(out); }

symbols_backend_fn tu_static_backend(void) { return favor_backend; }
