/*
 * data_map.h — named data: tensors and blobs looked up by key.
 *
 * A `.ptd` file (FlatTensor, docs/pte-format.md §8) is loaded as a data map and
 * passed to em_method_prepare; tensors of the program marked EXTERNAL are
 * resolved by fully-qualified name. A program's own `named_data` is a data map
 * too (for backends).
 *
 *     em_data_map *weights;
 *     em_status st = em_data_map_load(ptd_loader, &alloc, &weights);
 *     cfg.external = weights;
 */
#ifndef EMBER_DATA_MAP_H
#define EMBER_DATA_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "ember/allocator.h"
#include "ember/loader.h"
#include "ember/status.h"
#include "ember/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_data_map em_data_map;

/* The layout a `.ptd` records for a tensor. */
typedef struct em_tensor_layout {
  int8_t dtype;
  int32_t dim;
  int64_t sizes[EM_MAX_DIM];
  uint8_t dim_order[EM_MAX_DIM];
  int has_layout; /* 0 when the entry carries no layout (raw blob) */
} em_tensor_layout;

/*
 * Loads and fully verifies a `.ptd` from `loader` (retained: it must outlive
 * the map); the map itself comes from `alloc`.
 */
em_status em_data_map_load(em_data_loader *loader, em_allocator *alloc, em_data_map **map_out);

/* Number of keys, and the i-th key (NUL-terminated). */
size_t em_data_map_count(const em_data_map *map);
const char *em_data_map_key(const em_data_map *map, size_t i);

/*
 * Finds `key`: sets the data pointer and byte size, and the layout when
 * `layout_out` is not NULL. EM_ERR_NOT_FOUND when missing.
 */
em_status em_data_map_get(const em_data_map *map, const char *key, const void **data_out,
                          size_t *nbytes_out, em_tensor_layout *layout_out);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_DATA_MAP_H */
