#include "tests.h"

Suite *optim_suite(void)
{
    Suite *s = suite_create("optim");
    return s;
}
