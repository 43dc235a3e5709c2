#include "tests.h"

Suite *matmul_suite(void)
{
    Suite *s = suite_create("matmul");
    return s;
}
