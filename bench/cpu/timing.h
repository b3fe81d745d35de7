/* What the CPU probes in bench/cpu/ share: a monotonic clock in seconds, and qsort's order for
 * the samples whose median they report. */
#ifndef VELO_BENCH_TIMING_H
#define VELO_BENCH_TIMING_H
#include <time.h>

static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

#endif
