/*
 * registry.c — the kernel and backend registries.
 *
 * Both are fixed-size tables filled by explicit registration calls (no static
 * constructors). Lookups by string happen only while a method is prepared;
 * execute uses the resolved function pointers.
 */
#include <string.h>

#include "ember/backend.h"
#include "ember/kernel.h"
#include "ember/platform.h"

static const em_kernel_entry *g_kernels[EM_MAX_KERNELS];
static size_t g_n_kernels;

static const em_backend *g_backends[EM_MAX_BACKENDS];
static size_t g_n_backends;

em_status em_register_kernels(const em_kernel_entry *entries, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const em_kernel_entry *e = &entries[i];
    if (!e->name || !e->fn) return EM_ERR_INVALID_ARGUMENT;
    size_t j = 0;
    while (j < g_n_kernels && strcmp(g_kernels[j]->name, e->name) != 0) j++;
    if (j == g_n_kernels) {
      if (g_n_kernels == EM_MAX_KERNELS) {
        EM_LOG_ERROR("kernel registry full (%d entries) registering %s", EM_MAX_KERNELS, e->name);
        return EM_ERR_REGISTRATION_EXCEEDING_MAX_KERNELS;
      }
      g_n_kernels++;
    }
    g_kernels[j] = e; /* a later registration overrides (optimized over portable) */
  }
  return EM_OK;
}

const em_kernel_entry *em_find_kernel(const char *name) {
  for (size_t i = 0; i < g_n_kernels; i++)
    if (strcmp(g_kernels[i]->name, name) == 0) return g_kernels[i];
  return NULL;
}

size_t em_kernel_count(void) { return g_n_kernels; }

const em_kernel_entry *em_kernel_at(size_t i) { return i < g_n_kernels ? g_kernels[i] : NULL; }

void em_registry_clear(void) { g_n_kernels = 0; }

void *em_kernel_alloc_temp(em_kernel_ctx *ctx, size_t n, size_t align) {
  return ctx && ctx->temp ? em_allocator_alloc(ctx->temp, n, align) : NULL;
}

em_status em_register_backend(const em_backend *b) {
  if (!b || !b->name || !b->init || !b->execute) return EM_ERR_INVALID_ARGUMENT;
  if (em_find_backend(b->name)) return EM_ERR_REGISTRATION_ALREADY_REGISTERED;
  if (g_n_backends == EM_MAX_BACKENDS) return EM_ERR_REGISTRATION_EXCEEDING_MAX_KERNELS;
  g_backends[g_n_backends++] = b;
  return EM_OK;
}

const em_backend *em_find_backend(const char *name) {
  for (size_t i = 0; i < g_n_backends; i++)
    if (strcmp(g_backends[i]->name, name) == 0) return g_backends[i];
  return NULL;
}

void em_backends_clear(void) { g_n_backends = 0; }
