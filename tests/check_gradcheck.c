#include "tests.h"

Suite *gradcheck_suite(void)
{
    Suite *s = suite_create("gradcheck");
    return s;
}
