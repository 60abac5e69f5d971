/* bigalloc.c: see bigalloc.h. */
#include "util/bigalloc.h"

#include <stdint.h>
#include <sys/mman.h>

#define BIG_ALIGN ((size_t)2 << 20)

void *tela_big_alloc(size_t bytes) {
    if (bytes == 0 || bytes > SIZE_MAX - 2 * BIG_ALIGN) return NULL;
    const size_t len = (bytes + BIG_ALIGN - 1) / BIG_ALIGN * BIG_ALIGN;
    /* map one alignment unit more, then unmap the unaligned ends */
    unsigned char *raw = mmap(NULL, len + BIG_ALIGN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    unsigned char *p = (unsigned char *)(((uintptr_t)raw + BIG_ALIGN - 1) & ~(uintptr_t)(BIG_ALIGN - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    if (raw + len + BIG_ALIGN > p + len) munmap(p + len, (size_t)(raw + len + BIG_ALIGN - (p + len)));
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE); /* a hint: without it, normal pages */
#endif
    return p;
}

void tela_big_free(void *p, size_t bytes) {
    if (!p) return;
    munmap(p, (bytes + BIG_ALIGN - 1) / BIG_ALIGN * BIG_ALIGN);
}
