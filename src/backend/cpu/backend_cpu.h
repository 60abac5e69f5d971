/* backend_cpu.h: what the CPU backend offers beyond backend.h, for code
 * that runs only on the CPU (architectures not yet written over the
 * backend operations). */
#ifndef TELA_BACKEND_CPU_BACKEND_CPU_H
#define TELA_BACKEND_CPU_BACKEND_CPU_H

#include "backend/backend.h"
#include "util/threadpool.h"

/* The thread pool of a CPU exec (the exec must be the CPU backend's). */
tela_threadpool *tela_exec_cpu_pool(tela_exec *ex);

#endif
