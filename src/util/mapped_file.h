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

/* The entry points of the formats that are parsed in place (GGUF,
 * safetensors), around the format's own parse(data, size, name, map, out):
 * tela_parse_buffer checks a caller's buffer (NULL only when empty; name
 * "(buffer)" when NULL) and passes an empty mapping; tela_parse_file maps
 * path (which names it) and unmaps it again when parse fails. On success
 * parse keeps *map in the object it makes, which unmaps it when closed. */
typedef tela_status (*tela_parse_fn)(const void *data, size_t size, const char *name, const tela_mapped_file *map,
                                     void *out);
tela_status tela_parse_buffer(const void *data, size_t size, const char *name, tela_parse_fn parse, void *out);
tela_status tela_parse_file(const char *path, tela_parse_fn parse, void *out);

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer. */
tela_status tela_read_file(const char *path, char **out, size_t *size);

#endif
