/* jinja.h: a Jinja2 template engine, the subset that model chat templates use
 * (Llama 3.x, Qwen3, Qwen3.5, ChatML and the like), with the semantics of
 * Python's jinja2 in the environment Hugging Face transformers renders chat
 * templates with: ImmutableSandboxedEnvironment(trim_blocks=True,
 * lstrip_blocks=True) plus the loopcontrols extension, its own tojson filter
 * (ensure_ascii=False) and the raise_exception() and strftime_now() globals.
 *
 * The engine knows nothing about tokens or vocabularies: it turns a template
 * and a set of variables (a cJSON object: the JSON value model, which is what
 * chat messages and tool schemas are) into a string.
 *
 * Supported: {{ }}, {% %}, {# #}, whitespace control (- and +), raw; if/elif/
 * else, for (else, loop filter, tuple unpacking, loop.*), set (names, tuples,
 * namespace attributes, blocks), macro with defaults/varargs/kwargs, call
 * blocks and caller(), filter blocks, with, break/continue, generation;
 * the usual operators, literals, slicing, attribute/item access, python-style
 * string/dict/list methods, most built-in filters and tests, markupsafe's
 * rule that adding a plain string to a |safe one escapes the plain one.
 * Not supported: template inheritance and inclusion (extends, block,
 * include, import), recursive loops, format specs in str.format(), and
 * arbitrary-precision integers (64-bit, with overflow reported as an error).
 * Limits (nesting, macro recursion, 10 million steps, output and memory
 * caps) turn runaway templates into errors.
 *
 * Numbers from cJSON: an integral value that fits in 2^53 becomes an int,
 * anything else a float (cJSON does not keep "1.0" apart from "1").
 *
 * Errors (tela_status, message via tela_last_error(), naming the template,
 * line and column): TELA_ERR_FORMAT for a syntax error or a runtime error
 * (an undefined value used strictly, a type error, ...), TELA_ERR_ARG when
 * the template itself rejects its input through raise_exception(),
 * TELA_ERR_UNSUPPORTED for a construct tela does not implement or a template
 * that exceeds the execution limits, TELA_ERR_NOMEM when memory runs out. */
#ifndef TELA_TOKENIZER_JINJA_H
#define TELA_TOKENIZER_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "tela/tela.h"

typedef struct tela_jinja tela_jinja;

typedef struct tela_jinja_options {
    bool trim_blocks;           /* drop the first newline after a block or comment tag */
    bool lstrip_blocks;         /* drop spaces/tabs between a line start and a block or comment tag */
    bool keep_trailing_newline; /* keep a single newline at the end of the template */
} tela_jinja_options;

/* The options Hugging Face uses for chat templates: trim_blocks and
 * lstrip_blocks on, keep_trailing_newline off. */
tela_jinja_options tela_jinja_hf_options(void);

/* Parses a template. name is used in error messages ("chat template").
 * opt NULL means tela_jinja_hf_options(). */
tela_status tela_jinja_parse(const char *source, size_t len, const char *name,
                             const tela_jinja_options *opt, tela_jinja **out);
void tela_jinja_free(tela_jinja *tmpl);

typedef struct tela_jinja_render_params {
    /* seconds since the epoch that strftime_now() formats (local time);
     * 0 means the current time */
    int64_t now;
    /* upper bound on the rendered size and on working memory, in bytes;
     * 0 means the defaults (64 MiB of output, 1 GiB of memory) */
    size_t max_output;
    size_t max_memory;
} tela_jinja_render_params;

/* Renders tmpl with the variables of the JSON object vars (NULL: none).
 * On success *out is a NUL-terminated malloc'd string (caller frees) and
 * *out_len (if not NULL) its length. params may be NULL. */
tela_status tela_jinja_render(const tela_jinja *tmpl, const cJSON *vars,
                              const tela_jinja_render_params *params,
                              char **out, size_t *out_len);

#endif
