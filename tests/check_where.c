#include "tests.h"

Suite *where_suite(void)
{
    Suite *s = suite_create("where");
    return s;
}
