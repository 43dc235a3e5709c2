#include "tests.h"

Suite *rng_suite(void)
{
    Suite *s = suite_create("rng");
    return s;
}
