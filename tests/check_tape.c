#include "tests.h"

Suite *tape_suite(void)
{
    Suite *s = suite_create("tape");
    return s;
}
