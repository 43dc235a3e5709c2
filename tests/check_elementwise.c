#include "tests.h"

Suite *elementwise_suite(void)
{
    Suite *s = suite_create("elementwise");
    return s;
}
