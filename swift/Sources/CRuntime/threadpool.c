#define _GNU_SOURCE
#include "cruntime.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* Spin this many rounds waiting for work before sleeping on the condition variable. */
#define SPIN_ROUNDS 200000

struct vr_pool {
    int n;
    pthread_t *threads;
    _Atomic uint64_t generation; /* bumped once per job */
    _Atomic int pending;         /* workers still running the current job */
    _Atomic int stop;
    vr_job_fn job;
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic int sleepers;
};

typedef struct { vr_pool *pool; int ith; } worker_arg;

static void *worker(void *p) {
    worker_arg *arg = p;
    vr_pool *pool = arg->pool;
    int ith = arg->ith;
    free(arg);
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen) {
            if (atomic_load(&pool->stop)) return NULL;
            if (++spins < SPIN_ROUNDS) { cpu_relax(); continue; }
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->sleepers, 1);
            while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->mu);
            spins = 0;
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = gen;
        pool->job(pool->ctx, ith, pool->n);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel);
    }
}

vr_pool *vr_pool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    vr_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    pool->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    for (int i = 1; i < n_threads; i++) {
        worker_arg *arg = malloc(sizeof *arg);
        arg->pool = pool;
        arg->ith = i;
        pthread_create(&pool->threads[i], NULL, worker, arg);
    }
    return pool;
}

void vr_pool_destroy(vr_pool *pool) {
    if (!pool) return;
    atomic_store(&pool->stop, 1);
    pthread_mutex_lock(&pool->mu);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n; i++) pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    free(pool->threads);
    free(pool);
}

int vr_pool_size(const vr_pool *pool) { return pool ? pool->n : 1; }

void vr_pool_run(vr_pool *pool, vr_job_fn job, void *ctx) {
    if (!pool || pool->n == 1) { job(ctx, 0, 1); return; }
    pool->job = job;
    pool->ctx = ctx;
    atomic_store_explicit(&pool->pending, pool->n - 1, memory_order_release);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_acq_rel);
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
    job(ctx, 0, pool->n);
    while (atomic_load_explicit(&pool->pending, memory_order_acquire) > 0) cpu_relax();
}

int vr_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

uint64_t vr_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
