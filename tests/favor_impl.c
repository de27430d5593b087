#define FAVOR_IMPLEMENTATION
#include "favor.h"
