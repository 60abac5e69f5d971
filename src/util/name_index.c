/* name_index.c: sorting and binary search of name indexes (name_index.h). */
#include "util/name_index.h"

#include <stdlib.h>
#include <string.h>

static int name_ref_cmp(const void *a, const void *b) {
    return strcmp(((const tela_name_ref *)a)->name, ((const tela_name_ref *)b)->name);
}

size_t tela_name_index_sort(tela_name_ref *refs, size_t n) {
    if (n == 0) return 0;
    qsort(refs, n, sizeof *refs, name_ref_cmp);
    for (size_t i = 1; i < n; i++)
        if (strcmp(refs[i - 1].name, refs[i].name) == 0) return i;
    return 0;
}

const tela_name_ref *tela_name_index_find(const tela_name_ref *refs, size_t n, const char *name) {
    if (!refs || !name) return NULL;
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, refs[mid].name);
        if (c == 0) return &refs[mid];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}
