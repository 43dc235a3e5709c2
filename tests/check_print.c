#include "tests.h"

Suite *print_suite(void)
{
    Suite *s = suite_create("print");
    return s;
}
