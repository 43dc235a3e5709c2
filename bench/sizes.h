/* The attention head's sizes (B,T,C,head_size) every benchmark runs, from
 * the lesson's tiny one up; bench/peer_timing.py lists the same. */
#ifndef BENCH_SIZES_H
#define BENCH_SIZES_H

typedef struct size_config {
    const char *name;
    int B, T, C, hs;
} size_config;

static const size_config sizes[] = {
    {"tiny", 4, 8, 32, 16},       {"small", 16, 64, 64, 16},
    {"medium", 32, 128, 128, 32}, {"large", 32, 256, 384, 64},
    {"xl", 16, 1024, 512, 64},
};
enum { N_SIZES = sizeof sizes / sizeof sizes[0] };

#endif
