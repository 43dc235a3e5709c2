#include "tests.h"

Suite *errors_suite(void)
{
    Suite *s = suite_create("errors");
    return s;
}
