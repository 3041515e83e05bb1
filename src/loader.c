/*
 * loader.c — the buffer data loader: zero-copy ranges of caller memory.
 */
#include "ember/loader.h"

#include "ember/platform.h"

static em_status buffer_load(em_data_loader *self, uint64_t offset, uint64_t size,
                             const void **data_out) {
  em_buffer_loader *bl = (em_buffer_loader *)self;
  if (offset > self->size || size > self->size - offset) {
    EM_LOG_ERROR("load of [%llu, +%llu) is outside the %llu-byte buffer",
                 (unsigned long long)offset, (unsigned long long)size,
                 (unsigned long long)self->size);
    return EM_ERR_INVALID_ARGUMENT;
  }
  *data_out = bl->data + offset;
  return EM_OK;
}

em_data_loader *em_buffer_loader_init(em_buffer_loader *bl, const void *data, size_t size) {
  bl->base.load = buffer_load;
  bl->base.release = 0;
  bl->base.discard = 0; /* borrowed memory stays the caller's */
  bl->base.size = data ? size : 0;
  bl->data = (const uint8_t *)data;
  return &bl->base;
}
