#include "tests.h"

Suite *attention_suite(void)
{
    Suite *s = suite_create("attention");
    return s;
}
