#pragma once
#include <stdint.h>

/* A persistent pool of worker threads for data-parallel kernels. Workers spin briefly
 * between jobs (a decode step issues hundreds of small jobs) and then sleep. */
typedef struct vr_pool vr_pool;
/* job(ctx, ith, nth): thread ith of nth does its share. */
typedef void (*vr_job_fn)(void *ctx, int ith, int nth);

vr_pool *vr_pool_create(int n_threads);
void vr_pool_destroy(vr_pool *pool);
int vr_pool_size(const vr_pool *pool);
/* Runs job on all threads (the caller is thread 0) and returns when all are done. */
void vr_pool_run(vr_pool *pool, vr_job_fn job, void *ctx);
/* Number of online CPUs. */
int vr_cpu_count(void);
/* Monotonic clock in nanoseconds. */
uint64_t vr_now_ns(void);
