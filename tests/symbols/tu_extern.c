/* Translation unit 1 of tests/symbols: favor.h included twice plainly (the
 * include guard must make the second a no-op: no redefinition of its types),
 * then with FAVOR_IMPLEMENTATION (the implementation is expanded here, once,
 * with extern linkage), then once more with FAVOR_IMPLEMENTATION still defined
 * (the implementation guard must make that a no-op too). */
#include "favor.h"
#include "favor.h"
#define FAVOR_IMPLEMENTATION
#include "favor.h"
#include "favor.h"

#include "symbols.h"

int tu_extern_run(float *out) { SYMBOLS_RUN_BODY(out); }

symbols_backend_fn tu_extern_backend(void) { return favor_backend; }
