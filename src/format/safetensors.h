/* safetensors.h: Hugging Face safetensors files and checkpoint directories
 * (single file, or shards listed in model.safetensors.index.json), mmapped,
 * plus the checkpoint's config.json. Untrusted input: the JSON header, dtypes,
 * shapes and offsets are all checked. */
#ifndef TELA_FORMAT_SAFETENSORS_H
#define TELA_FORMAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "format/tensor.h"
#include "util/mapped_file.h"

typedef struct tela_st_file tela_st_file;      /* one .safetensors file */
typedef struct tela_checkpoint tela_checkpoint; /* a directory, or one file */

/* Parses one safetensors buffer the caller keeps alive (fuzzing, tests). */
tela_status tela_st_parse(const void *data, size_t size, const char *name, tela_st_file **out);
tela_status tela_st_open(const char *path, tela_st_file **out);
void tela_st_close(tela_st_file *f);
size_t tela_st_n_tensors(const tela_st_file *f);
const tela_tensor *tela_st_tensor(const tela_st_file *f, size_t i);
/* __metadata__ entries (string → string), or NULL. */
size_t tela_st_n_metadata(const tela_st_file *f);
void tela_st_metadata(const tela_st_file *f, size_t i, const char **key, const char **value);

/* Opens a checkpoint: a directory (config.json, model.safetensors or
 * model.safetensors.index.json + shards) or a single .safetensors file. */
tela_status tela_checkpoint_open(const char *path, tela_checkpoint **out);
void tela_checkpoint_close(tela_checkpoint *ck);
size_t tela_checkpoint_n_tensors(const tela_checkpoint *ck);
const tela_tensor *tela_checkpoint_tensor(const tela_checkpoint *ck, size_t i);
const tela_tensor *tela_checkpoint_find(const tela_checkpoint *ck, const char *name);
/* The parsed config.json (a cJSON *), or NULL when there is none. */
const void *tela_checkpoint_config(const tela_checkpoint *ck);
/* The directory holding the checkpoint (for tokenizer.json etc.). */
const char *tela_checkpoint_dir(const tela_checkpoint *ck);

/* ---- additions (formats layer) */

/* Dtypes that have no tela_type (U8, U16, U32, U64, BOOL, F8_E4M3,
 * F8_E5M2) are still parsed, size-checked and listed, with this type and
 * their dtype string; using such a tensor is an error (tela_checkpoint_get). */
#define TELA_ST_TYPE_UNSUPPORTED TELA_TYPE_COUNT

/* The safetensors dtype string of tensor i ("F32", "BF16", "U8", ...). */
const char *tela_st_tensor_dtype(const tela_st_file *f, size_t i);
/* File offset of the data section (8 + header length). */
size_t tela_st_data_offset(const tela_st_file *f);
const char *tela_checkpoint_tensor_dtype(const tela_checkpoint *ck, size_t i);
/* The file name (without directory) of the shard holding tensor i. */
const char *tela_checkpoint_tensor_shard(const tela_checkpoint *ck, size_t i);
/* Byte offset of tensor i's data within its shard file. */
uint64_t tela_checkpoint_tensor_offset(const tela_checkpoint *ck, size_t i);
/* The safetensors files of the checkpoint (one, or the shards in name order). */
size_t tela_checkpoint_n_files(const tela_checkpoint *ck);
const tela_st_file *tela_checkpoint_file(const tela_checkpoint *ck, size_t i);
const char *tela_checkpoint_file_name(const tela_checkpoint *ck, size_t i);
/* Looks a tensor up for use: TELA_ERR_NOT_FOUND when absent and
 * TELA_ERR_UNSUPPORTED when its dtype has no tela_type, with a message
 * naming the tensor (and the dtype). */
tela_status tela_checkpoint_get(const tela_checkpoint *ck, const char *name, const tela_tensor **out);

#endif
