/*
 * status.h — error codes of the Ember runtime.
 *
 * Every fallible function returns an em_status. The numeric values equal
 * ExecuTorch's `Error` codes (runtime/core/error.h): they cross the backend ABI
 * and appear in logs, so they never change.
 *
 *     em_status st = em_program_load(loader, EM_VERIFY_FULL, &alloc, &prog);
 *     if (st != EM_OK) {
 *       fprintf(stderr, "load failed: %s\n", em_status_str(st));
 *     }
 */
#ifndef EMBER_STATUS_H
#define EMBER_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum em_status {
  EM_OK = 0x00,
  EM_ERR_INTERNAL = 0x01,
  EM_ERR_INVALID_STATE = 0x02,
  EM_END_OF_METHOD = 0x03,
  EM_ERR_ALREADY_LOADED = 0x04,
  EM_ERR_NOT_SUPPORTED = 0x10,
  EM_ERR_NOT_IMPLEMENTED = 0x11,
  EM_ERR_INVALID_ARGUMENT = 0x12,
  EM_ERR_INVALID_TYPE = 0x13,
  EM_ERR_OPERATOR_MISSING = 0x14,
  EM_ERR_REGISTRATION_EXCEEDING_MAX_KERNELS = 0x15,
  EM_ERR_REGISTRATION_ALREADY_REGISTERED = 0x16,
  EM_ERR_NOT_FOUND = 0x20,
  EM_ERR_MEMORY_ALLOCATION_FAILED = 0x21,
  EM_ERR_ACCESS_FAILED = 0x22,
  EM_ERR_INVALID_PROGRAM = 0x23,
  EM_ERR_INVALID_EXTERNAL_DATA = 0x24,
  EM_ERR_OUT_OF_RESOURCES = 0x25,
  EM_ERR_DELEGATE_INVALID_COMPATIBILITY = 0x30,
  EM_ERR_DELEGATE_MEMORY_ALLOCATION_FAILED = 0x31,
  EM_ERR_DELEGATE_INVALID_HANDLE = 0x32
} em_status;

/* Returns a static, human-readable name for a status ("InvalidProgram"). */
const char *em_status_str(em_status status);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_STATUS_H */
