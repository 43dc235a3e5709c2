#include "tests.h"

Suite *reduce_suite(void)
{
    Suite *s = suite_create("reduce");
    return s;
}
