/* name_index.h: a sorted index of names (GGUF keys and tensor names,
 * safetensors tensor names), for the duplicate check at load and the
 * binary-search lookups after it. */
#ifndef TELA_UTIL_NAME_INDEX_H
#define TELA_UTIL_NAME_INDEX_H

#include <stddef.h>

/* A name and the position of its entry in the owner's own array. */
typedef struct tela_name_ref {
    const char *name;
    size_t index;
} tela_name_ref;

/* Sorts refs by name (strcmp order). Returns the position i of the first
 * duplicate (refs[i - 1] and refs[i] have the same name), 0 if the names are
 * unique. */
size_t tela_name_index_sort(tela_name_ref *refs, size_t n);

/* The ref named name in a sorted index; NULL when absent (or refs or name
 * is NULL). */
const tela_name_ref *tela_name_index_find(const tela_name_ref *refs, size_t n, const char *name);

#endif
