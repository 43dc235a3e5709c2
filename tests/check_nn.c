#include "tests.h"

Suite *nn_suite(void)
{
    Suite *s = suite_create("nn");
    return s;
}
