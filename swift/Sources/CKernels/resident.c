/* resident.c — a file mapping's bytes moved into anonymous memory at the same addresses.
 *
 * CPU decode reads every weight once a token. On this project's Linux machine, reads from a
 * file mapping (page-cache pages, 4 KiB) ran ~20 % slower than from anonymous memory, and
 * 7B Q4_0 decode ran 14-18 % faster from a huge-page copy (bench/RESULTS.md). mremap moves the
 * copy over the mapping, so every pointer into it stays valid. Linux only (mremap). */
#define _GNU_SOURCE
#include "ckernels.h"
#include <stdint.h>
#include <string.h>
#if defined(__linux__)
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct { uint8_t *dst; const uint8_t *src; size_t n; } copy_job;
static void *copy_part(void *arg) {
    copy_job *j = arg;
    memcpy(j->dst, j->src, j->n);
    return NULL;
}
#endif

int ck_make_resident(void *addr, size_t size) {
#if defined(__linux__)
    const uintptr_t huge = (uintptr_t)2 << 20, page = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (!addr || size == 0 || ((uintptr_t)addr & (page - 1))) return -1;
    const size_t len = (size + page - 1) & ~(page - 1);
    uint8_t *raw = mmap(NULL, len + 2 * huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return -1;
    /* the copy at the same offset within a 2 MiB page as addr: the move then keeps huge pages */
    uint8_t *a = (uint8_t *)((((uintptr_t)raw + huge - 1) & ~(huge - 1)) + ((uintptr_t)addr & (huge - 1)));
    if (a > raw) munmap(raw, (size_t)(a - raw));
    const size_t tail = (size_t)(raw + len + 2 * huge - (a + len));
    if (tail) munmap(a + len, tail);
    madvise(a, len, MADV_HUGEPAGE);
    /* two threads: faulting in and zeroing the new pages costs as much as the copy */
    const size_t half = size / 2 & ~(size_t)(huge - 1);
    copy_job j = { a + half, (const uint8_t *)addr + half, size - half };
    pthread_t t;
    const int threaded = half > 0 && pthread_create(&t, NULL, copy_part, &j) == 0;
    memcpy(a, addr, threaded ? half : size);
    if (threaded) pthread_join(t, NULL);
    if (mprotect(a, len, PROT_READ) != 0 || mremap(a, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, addr) == MAP_FAILED) {
        munmap(a, len);
        return -1;
    }
    return 0;
#else
    (void)addr; (void)size;
    return 1;
#endif
}
