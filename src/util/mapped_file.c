/* mapped_file.c: mmap of model files (weights are used in place), the
 * buffer/file entry points of the formats parsed in place, and a small
 * whole-file reader for JSON and text. */
#include "util/mapped_file.h"
#include "util/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

tela_status tela_map_file(const char *path, tela_mapped_file *out) {
    out->data = NULL;
    out->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tela_errorf(TELA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return tela_errorf(TELA_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return tela_errorf(TELA_ERR_IO, "%s: is a directory, not a file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return TELA_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return tela_errorf(TELA_ERR_IO, "%s: cannot mmap: %s", path, strerror(e));
    out->data = p;
    out->size = (size_t)st.st_size;
    return TELA_OK;
}

void tela_unmap_file(tela_mapped_file *file) {
    if (file->data) munmap((void *)file->data, file->size);
    file->data = NULL;
    file->size = 0;
}

tela_status tela_parse_buffer(const void *data, size_t size, const char *name, tela_parse_fn parse, void *out) {
    if (!name) name = "(buffer)";
    if (!data && size) return tela_errorf(TELA_ERR_ARG, "%s: NULL buffer", name);
    const tela_mapped_file none = {NULL, 0};
    return parse(data, size, name, &none, out);
}

tela_status tela_parse_file(const char *path, tela_parse_fn parse, void *out) {
    tela_mapped_file map;
    TELA_TRY(tela_map_file(path, &map));
    tela_status s = parse(map.data, map.size, path, &map, out);
    if (s) tela_unmap_file(&map);
    return s;
}

tela_status tela_read_file(const char *path, char **out, size_t *size) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return tela_errorf(TELA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return tela_errorf(TELA_ERR_IO, "%s: read error", path);
    }
    buf[n] = '\0';
    *out = buf;
    if (size) *size = n;
    return TELA_OK;
}
