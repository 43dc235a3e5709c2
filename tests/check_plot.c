#include "tests.h"

Suite *plot_suite(void)
{
    Suite *s = suite_create("plot");
    return s;
}
