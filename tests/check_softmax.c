#include "tests.h"

Suite *softmax_suite(void)
{
    Suite *s = suite_create("softmax");
    return s;
}
