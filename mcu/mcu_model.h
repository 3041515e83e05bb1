/*
 * mcu_model.h — the types of the generated model_data.h (mcu/gen_model.py):
 * the embedded `.pte`, its planned arenas, and test cases (inputs plus the
 * outputs the host build of Ember computed for them).
 */
#ifndef EMBER_MCU_MODEL_H
#define EMBER_MCU_MODEL_H

#include <stdint.h>

#define MCU_MAX_DIM 8

/* One input or expected output tensor, contiguous. dtype -1: not a tensor (skipped). */
typedef struct mcu_tensor {
  int8_t dtype;
  int32_t dim;
  int64_t sizes[MCU_MAX_DIM];
  int64_t numel;
  const void *data;
} mcu_tensor;

#endif /* EMBER_MCU_MODEL_H */
