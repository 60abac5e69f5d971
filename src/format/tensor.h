/* tensor.h: a view of one stored tensor, the common currency between the
 * file formats (GGUF, safetensors) and the models. Data is not owned. */
#ifndef TELA_FORMAT_TENSOR_H
#define TELA_FORMAT_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include "tela/tela.h"

#define TELA_MAX_DIMS 4

/* Shapes follow ggml: ne[0] is the innermost (contiguous) dimension, so a
 * weight matrix of n_out rows by n_in columns has ne[0] = n_in, ne[1] = n_out.
 * Safetensors shapes (outermost first) are reversed into this order. */
typedef struct tela_tensor {
    const char *name;
    tela_type type;
    int n_dims;
    int64_t ne[TELA_MAX_DIMS];   /* unused dims are 1 */
    const void *data;
    size_t nbytes;
} tela_tensor;

static inline int64_t tela_tensor_nelements(const tela_tensor *t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

#endif
