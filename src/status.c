/*
 * status.c — names of em_status codes.
 */
#include "ember/status.h"

const char *em_status_str(em_status status) {
  switch (status) {
  case EM_OK: return "Ok";
  case EM_ERR_INTERNAL: return "Internal";
  case EM_ERR_INVALID_STATE: return "InvalidState";
  case EM_END_OF_METHOD: return "EndOfMethod";
  case EM_ERR_ALREADY_LOADED: return "AlreadyLoaded";
  case EM_ERR_NOT_SUPPORTED: return "NotSupported";
  case EM_ERR_NOT_IMPLEMENTED: return "NotImplemented";
  case EM_ERR_INVALID_ARGUMENT: return "InvalidArgument";
  case EM_ERR_INVALID_TYPE: return "InvalidType";
  case EM_ERR_OPERATOR_MISSING: return "OperatorMissing";
  case EM_ERR_REGISTRATION_EXCEEDING_MAX_KERNELS: return "RegistrationExceedingMaxKernels";
  case EM_ERR_REGISTRATION_ALREADY_REGISTERED: return "RegistrationAlreadyRegistered";
  case EM_ERR_NOT_FOUND: return "NotFound";
  case EM_ERR_MEMORY_ALLOCATION_FAILED: return "MemoryAllocationFailed";
  case EM_ERR_ACCESS_FAILED: return "AccessFailed";
  case EM_ERR_INVALID_PROGRAM: return "InvalidProgram";
  case EM_ERR_INVALID_EXTERNAL_DATA: return "InvalidExternalData";
  case EM_ERR_OUT_OF_RESOURCES: return "OutOfResources";
  case EM_ERR_DELEGATE_INVALID_COMPATIBILITY: return "DelegateInvalidCompatibility";
  case EM_ERR_DELEGATE_MEMORY_ALLOCATION_FAILED: return "DelegateMemoryAllocationFailed";
  case EM_ERR_DELEGATE_INVALID_HANDLE: return "DelegateInvalidHandle";
  }
  return "Unknown";
}
