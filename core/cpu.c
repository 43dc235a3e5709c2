/* Which vector instructions the kernels may use: read once from cpuid (and
 * the OS's XSAVE state, through GCC's __builtin_cpu_supports), so one
 * library binary serves every x86-64 and picks its paths at run time.
 * Knows nothing of tensors; calls nothing of ours.
 *
 * TG_CPU=scalar|avx2|avx512 in the environment caps the level (never
 * raises it above what the CPU has): the tests run the vector paths against
 * the scalar ones that way, and a user can rule out a path. */
#include "core/internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* -1 until first read; then the level, as tg_cpu_level. */
static _Atomic int level = -1;
/* The cap set by tg__cpu_cap, or -1 for none (then TG_CPU's). */
static _Atomic int cap = -1;

static int detect(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return TG_CPU_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return TG_CPU_AVX2;
#endif
    return TG_CPU_SCALAR;
}

/* TG_CPU's level, or TG_CPU_AVX512 (no cap) when unset or unknown. */
static int env_cap(void)
{
    const char *v = getenv("TG_CPU");
    if (!v)
        return TG_CPU_AVX512;
    if (strcmp(v, "scalar") == 0)
        return TG_CPU_SCALAR;
    if (strcmp(v, "avx2") == 0)
        return TG_CPU_AVX2;
    return TG_CPU_AVX512;
}

int tg__cpu_level(void)
{
    int l = atomic_load_explicit(&level, memory_order_relaxed);
    if (l < 0) {
        const int have = detect(), limit = env_cap();
        l = have < limit ? have : limit;
        atomic_store_explicit(&level, l, memory_order_relaxed);
    }
    const int c = atomic_load_explicit(&cap, memory_order_relaxed);
    return c >= 0 && c < l ? c : l;
}

int tg__cpu_cap(int new_cap)
{
    return atomic_exchange_explicit(&cap, new_cap, memory_order_relaxed);
}

const char *tg__cpu_name(int l)
{
    return l == TG_CPU_AVX512 ? "avx512" : l == TG_CPU_AVX2 ? "avx2" : "scalar";
}
