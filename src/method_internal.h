/*
 * method_internal.h — the prepared form of a method, shared by method.c
 * (preparation, inputs/outputs) and execute.c (the instruction loop).
 */
#ifndef EMBER_SRC_METHOD_INTERNAL_H
#define EMBER_SRC_METHOD_INTERNAL_H

#include "internal.h"

typedef struct em_instr {
  uint8_t kind; /* INSTR_* */
  union {
    struct {
      em_kernel_fn fn;
      em_evalue **args;
      uint32_t n_args;
      uint32_t op;
      uint32_t check_data; /* args whose data may be unbound at run time: check before the call */
    } k;
    struct {
      uint32_t delegate;
      em_evalue **args;
      uint32_t n_args;
    } d;
    struct {
      uint32_t from, to;
    } mv;
    struct {
      uint32_t cond, dest;
    } jf;
    struct {
      uint32_t value;
    } fr;
  } u;
} em_instr;

/* em_method.input_flags */
enum {
  EM_IN_PLANNED = 1,   /* the input has planned memory (set_input copies into it) */
  EM_IN_READ_ONLY = 2, /* no instruction writes, moves, frees or views it; not an output */
  EM_IN_BOUND = 4,     /* bound to the caller's memory until the end of the next execute */
};

typedef struct em_chain {
  em_instr *instrs;
  uint32_t n;
} em_chain;

typedef struct em_delegate_inst {
  const em_backend *backend;
  void *handle;
  const char *name;
  bool ready;
} em_delegate_inst;

struct em_method {
  const em_program *program;
  const char *name;
  em_evalue *values;
  uint32_t n_values;
  const int32_t *inputs; /* value indices (copied) */
  uint32_t n_inputs;
  int32_t *outputs;
  uint32_t n_outputs;
  bool *input_set;
  uint8_t *input_flags; /* per input: EM_IN_* */
  void **input_home;    /* per planned tensor input: its planned memory */
  em_chain *chains;
  uint32_t n_chains;
  const char **op_names; /* "ns::op.overload" per operator */
  uint32_t n_ops;
  em_delegate_inst *delegates;
  uint32_t n_delegates;
  em_allocator *temp;
  em_threadpool *pool;
  const em_profiler *profiler;
  uint64_t max_instructions;
};

/* Points the inputs that em_method_bind_input_tensor bound back at their planned memory (the
 * end of every execute). */
void em_method_unbind_inputs(em_method *m);

#endif /* EMBER_SRC_METHOD_INTERNAL_H */
