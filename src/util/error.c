/* error.c: the per-thread error message and the status names. */
#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define TELA_ERROR_MAX 1024

static _Thread_local char g_message[TELA_ERROR_MAX];

tela_status tela_errorf(tela_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_message, sizeof g_message, fmt, ap);
    va_end(ap);
    return code;
}

tela_status tela_error_prefix(tela_status code, const char *fmt, ...) {
    char prefix[TELA_ERROR_MAX];
    char old[TELA_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_message, sizeof old);
    size_t n = strlen(prefix);
    if (n >= sizeof g_message) n = sizeof g_message - 1;
    memcpy(g_message, prefix, n);
    size_t m = strlen(old);
    if (m > sizeof g_message - 1 - n) m = sizeof g_message - 1 - n;
    memcpy(g_message + n, old, m);
    g_message[n + m] = '\0';
    return code;
}

void tela_error_clear(void) { g_message[0] = '\0'; }

const char *tela_last_error(void) { return g_message[0] ? g_message : "no error"; }

const char *tela_status_name(tela_status status) {
    switch (status) {
    case TELA_OK: return "ok";
    case TELA_ERR_ARG: return "invalid argument";
    case TELA_ERR_IO: return "I/O error";
    case TELA_ERR_FORMAT: return "malformed input";
    case TELA_ERR_UNSUPPORTED: return "unsupported";
    case TELA_ERR_NOMEM: return "out of memory";
    case TELA_ERR_CONTEXT: return "context full";
    case TELA_ERR_NOT_FOUND: return "not found";
    case TELA_ERR_INTERNAL: return "internal error";
    case TELA_ERR_BUSY: return "busy";
    }
    return "unknown status";
}

const char *tela_version(void) { return TELA_VERSION; }
