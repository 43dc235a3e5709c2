#include <tapegrad.h>
int main(void) { return 0; }
