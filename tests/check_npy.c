#include "tests.h"

Suite *npy_suite(void)
{
    Suite *s = suite_create("npy");
    return s;
}
