/* Read bandwidth of this machine's memory, the ceiling of CPU decode (every weight is read once
 * per generated token): THREADS threads each sum their share of a SIZE-MiB buffer, REPS times;
 * the median pass gives GB/s. Built and run by bench/cpu/bandwidth.sh.
 *   bandwidth SIZE_MIB THREADS REPS */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>
#include "timing.h"

typedef struct { const __m256i *p; size_t n; long long sink; } job;

static void *reader(void *arg) {
    job *j = arg;
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i + 4 <= j->n; i += 4) {  /* four independent streams of 32-byte loads */
        a = _mm256_xor_si256(a, _mm256_load_si256(j->p + i));
        b = _mm256_xor_si256(b, _mm256_load_si256(j->p + i + 1));
        c = _mm256_xor_si256(c, _mm256_load_si256(j->p + i + 2));
        d = _mm256_xor_si256(d, _mm256_load_si256(j->p + i + 3));
    }
    __m256i x = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    j->sink = _mm256_extract_epi64(x, 0);
    return NULL;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoull(argv[1], 0, 10) : 2048;
    int threads = argc > 2 ? atoi(argv[2]) : 2, reps = argc > 3 ? atoi(argv[3]) : 7;
    if (threads < 1 || threads > 256 || reps < 1 || mib < 64) { fprintf(stderr, "usage: bandwidth SIZE_MIB>=64 THREADS REPS\n"); return 2; }
    size_t bytes = mib << 20, vecs = bytes / 32;
    __m256i *buf = aligned_alloc(64, bytes);
    if (!buf) { fprintf(stderr, "cannot allocate %zu MiB\n", mib); return 1; }
    memset(buf, 1, bytes); /* touch every page first */
    double gbs[64];
    if (reps > 64) reps = 64;
    long long sink = 0;
    for (int r = 0; r < reps; r++) {
        pthread_t t[256];
        job jobs[256];
        double t0 = now();
        for (int i = 0; i < threads; i++) {
            size_t lo = vecs * i / threads, hi = vecs * (i + 1) / threads;
            jobs[i] = (job){ buf + lo, hi - lo, 0 };
            pthread_create(&t[i], NULL, reader, &jobs[i]);
        }
        for (int i = 0; i < threads; i++) { pthread_join(t[i], NULL); sink ^= jobs[i].sink; }
        gbs[r] = bytes / (now() - t0) / 1e9;
    }
    qsort(gbs, reps, sizeof gbs[0], cmp);
    printf("{\"size_mib\": %zu, \"threads\": %d, \"reps\": %d, \"median_gbs\": %.2f, \"max_gbs\": %.2f, \"sink\": %lld}\n",
           mib, threads, reps, gbs[reps / 2], gbs[reps - 1], sink & 1);
    free(buf);
    return 0;
}
