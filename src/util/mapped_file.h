/* mapped_file.h: read-only memory mapping of a whole file. */
#ifndef TELA_UTIL_MAPPED_FILE_H
#define TELA_UTIL_MAPPED_FILE_H

#include <stddef.h>
#include "tela/tela.h"

typedef struct tela_mapped_file {
    const unsigned char *data; /* NULL for an empty file */
    size_t size;
} tela_mapped_file;

/* Maps path read-only. Errors name the file and the failing call. */
tela_status tela_map_file(const char *path, tela_mapped_file *out);
void tela_unmap_file(tela_mapped_file *file);

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer. */
tela_status tela_read_file(const char *path, char **out, size_t *size);

#endif
