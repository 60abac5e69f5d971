/* bigalloc.h: large zeroed allocations (hundreds of MB of packed weights)
 * straight from the kernel, asking for transparent huge pages: 2 MB pages
 * cut page faults at load ~500x and TLB misses while the weights stream
 * past during decoding. */
#ifndef TELA_UTIL_BIGALLOC_H
#define TELA_UTIL_BIGALLOC_H

#include <stddef.h>

/* bytes of zeroed memory aligned to 2 MB, or NULL (errno set). */
void *tela_big_alloc(size_t bytes);

/* Frees what tela_big_alloc returned for the same byte count. */
void tela_big_free(void *p, size_t bytes);

#endif
