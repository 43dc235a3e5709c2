#include "tests.h"

Suite *tensor_suite(void)
{
    Suite *s = suite_create("tensor");
    return s;
}
