#include "tests.h"

Suite *nn_ops_suite(void)
{
    Suite *s = suite_create("nn_ops");
    return s;
}
