/* error.h: setting the thread-local error message behind tela_last_error(). */
#ifndef TELA_UTIL_ERROR_H
#define TELA_UTIL_ERROR_H

#include "tela/tela.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Records a formatted message for tela_last_error() and returns code, so a
 * failing path reads: return tela_errorf(TELA_ERR_FORMAT, "%s: ...", path); */
tela_status tela_errorf(tela_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes the current message with more context ("loading x.gguf: ") and
 * returns code unchanged. */
tela_status tela_error_prefix(tela_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void tela_error_clear(void);

/* Propagates a failing status. */
#define TELA_TRY(expr) do { tela_status tela_try_s_ = (expr); if (tela_try_s_ != TELA_OK) return tela_try_s_; } while (0)

#ifdef __cplusplus
}
#endif
#endif
