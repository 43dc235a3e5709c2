#include "tests.h"

Suite *views_suite(void)
{
    Suite *s = suite_create("views");
    return s;
}
