/*
 * execute.c — the instruction loop (docs/pte-format.md §6).
 *
 * KernelCall calls the resolved kernel with the pre-built argument pointers;
 * DelegateCall hands the delegate its inputs then outputs; MoveCall copies a
 * value (tensors alias); JumpFalseCall jumps to an absolute index when its
 * condition is false; FreeCall forgets a tensor's data. Temp memory is reset
 * after every instruction, and a cap on executed instructions stops loops.
 * Nothing here allocates.
 */
#include <string.h>

#include "method_internal.h"

static bool cond_value(const em_evalue *v) {
  if (v->tag == EM_TAG_BOOL) return v->u.b;
  const em_tensor *t = v->u.tensor;
  if (!t->data) return false;
  for (int64_t i = 0; i < t->numel; i++) {
    /* A bool tensor is false if any element is false; other dtypes compare to zero. */
    size_t es = em_dtype_size(t->dtype);
    const uint8_t *p = (const uint8_t *)t->data + (size_t)i * es;
    bool nz = false;
    for (size_t b = 0; b < es; b++) nz |= p[b] != 0;
    if (!nz) return false;
  }
  return true;
}

static const char *instr_name(const em_method *m, const em_instr *in) {
  switch (in->kind) {
  case INSTR_KERNEL_CALL: return m->op_names[in->u.k.op];
  case INSTR_DELEGATE_CALL: return m->delegates[in->u.d.delegate].name;
  case INSTR_MOVE_CALL: return "executorch::move";
  case INSTR_JUMP_FALSE_CALL: return "executorch::jump_false";
  default: return "executorch::free";
  }
}

static bool unbound(const em_evalue *v) {
  if (!v) return false;
  if (v->tag == EM_TAG_TENSOR) return !v->u.tensor->data && v->u.tensor->numel_bound > 0;
  if (v->tag == EM_TAG_LIST_TENSOR || v->tag == EM_TAG_LIST_OPTIONAL_TENSOR)
    for (size_t k = 0; k < v->u.list.n; k++)
      if (unbound(v->u.list.items[k])) return true;
  return false;
}

/*
 * Instructions flagged at prepare (a tensor argument had no data then: unplanned inputs, view
 * results, control-flow placeholders) check that every argument has data now. The last argument
 * of executorch_prim::et_view is its result, which the kernel binds.
 */
static em_status check_bound(const em_method *m, const em_instr *in) {
  uint32_t n = in->u.k.n_args;
  if (strcmp(m->op_names[in->u.k.op], "executorch_prim::et_view.default") == 0 && n) n--;
  for (uint32_t i = 0; i < n; i++)
    if (unbound(in->u.k.args[i]))
      EM_FAIL(EM_ERR_INVALID_STATE, "%s: argument %u is a tensor with no data bound",
              m->op_names[in->u.k.op], i);
  return EM_OK;
}

static em_status run_instr(em_method *m, const em_instr *in, uint32_t chain, uint32_t *pc) {
  switch (in->kind) {
  case INSTR_KERNEL_CALL: {
    if (in->u.k.check_data) {
      em_status cs = check_bound(m, in);
      if (cs != EM_OK) return cs;
    }
    em_kernel_ctx ctx = {m->temp, m->pool, m->op_names[in->u.k.op]};
    em_status st = in->u.k.fn(&ctx, in->u.k.args);
    *pc += 1;
    return st;
  }
  case INSTR_DELEGATE_CALL: {
    em_delegate_inst *d = &m->delegates[in->u.d.delegate];
    em_backend_exec_ctx ctx = {m->temp, m->pool, m->name, NULL, (int32_t)chain, (int32_t)*pc};
#if EM_ENABLE_PROFILING
    if (m->profiler && m->profiler->record) ctx.profiler = m->profiler;
#endif
    *pc += 1;
    return d->backend->execute(&ctx, d->handle, in->u.d.args, in->u.d.n_args);
  }
  case INSTR_MOVE_CALL:
    m->values[in->u.mv.to] = m->values[in->u.mv.from];
    *pc += 1;
    return EM_OK;
  case INSTR_JUMP_FALSE_CALL: {
    const em_evalue *c = &m->values[in->u.jf.cond];
    if (c->tag != EM_TAG_BOOL && c->tag != EM_TAG_TENSOR) return EM_ERR_INVALID_TYPE;
    *pc = cond_value(c) ? *pc + 1 : in->u.jf.dest;
    return EM_OK;
  }
  case INSTR_FREE_CALL: {
    /* Prepare checked that the value is a tensor; a move may have put another kind of value in
     * its slot since (a hostile file: an int there would be taken for a tensor's address). */
    em_evalue *v = &m->values[in->u.fr.value];
    if (v->tag != EM_TAG_TENSOR || !v->u.tensor)
      EM_FAIL(EM_ERR_INVALID_TYPE, "free of value %u, which a move made a non-tensor (tag %u)",
              in->u.fr.value, v->tag);
    v->u.tensor->data = NULL;
    *pc += 1;
    return EM_OK;
  }
  default: return EM_ERR_INTERNAL;
  }
}

#if EM_ENABLE_PROFILING
/* What a kernel call wrote: its last argument (ExecuTorch's out-variant convention). */
static const em_evalue *instr_output(const em_instr *in) {
  if (in->kind != INSTR_KERNEL_CALL || in->u.k.n_args == 0) return NULL;
  return in->u.k.args[in->u.k.n_args - 1];
}

/* Hands the profiler's recorder one event. */
static void trace_event(const em_profiler *prof, uint32_t kind, const char *name, int32_t chain,
                        int32_t instr, uint64_t t0, uint64_t t1, const em_evalue *output) {
  em_profile_event ev = {name, t0, t1 < t0 ? t0 : t1, chain, instr, -1, kind, output};
  prof->record(prof->record_ctx, &ev);
}
#endif

static em_status run_chains(em_method *m) {
  uint64_t executed = 0;
  for (uint32_t c = 0; c < m->n_chains; c++) {
    const em_chain *ch = &m->chains[c];
    uint32_t pc = 0;
    while (pc < ch->n) {
      if (++executed > m->max_instructions)
        EM_FAIL(EM_ERR_INVALID_STATE, "method '%s' exceeded %llu instructions (a loop?)", m->name,
                (unsigned long long)m->max_instructions);
      const em_instr *in = &ch->instrs[pc];
      uint32_t at = pc;
#if EM_ENABLE_PROFILING
      const em_profiler *prof = m->profiler;
      uint64_t t0 = 0;
      if (prof) {
        if (prof->begin) prof->begin(prof->ctx, at, instr_name(m, in));
        t0 = em_now_ns();
      }
#endif
      em_status st = run_instr(m, in, c, &pc);
#if EM_ENABLE_PROFILING
      if (prof) {
        uint64_t t1 = em_now_ns();
        if (prof->end) prof->end(prof->ctx, at, instr_name(m, in), t1 - t0);
        if (prof->record)
          trace_event(prof, EM_PROFILE_INSTRUCTION,
                      in->kind == INSTR_DELEGATE_CALL ? "DELEGATE_CALL" : instr_name(m, in),
                      (int32_t)c, (int32_t)at, t0, t1, st == EM_OK ? instr_output(in) : NULL);
      }
#endif
      if (m->temp) em_allocator_reset(m->temp);
      if (st != EM_OK) {
        const char *why = em_last_error();
        EM_FAIL(st, "method '%s' instruction %u (%s) failed: %s%s%s", m->name, at,
                instr_name(m, in), em_status_str(st), why[0] ? ": " : "", why);
      }
    }
  }
  return EM_OK;
}

em_status em_method_execute(em_method *m) {
  if (!m) return EM_ERR_INVALID_ARGUMENT;
  em_clear_last_error();
  for (uint32_t i = 0; i < m->n_inputs; i++) {
    const em_evalue *v = &m->values[m->inputs[i]];
    if (!m->input_set[i] && v->tag == EM_TAG_TENSOR && !v->u.tensor->data)
      EM_FAIL(EM_ERR_INVALID_STATE, "input %u of '%s' was not set", i, m->name);
  }
  if (m->temp) em_allocator_reset(m->temp);
  em_threadpool_wake(m->pool); /* workers asleep since the last call spin up meanwhile */
#if EM_ENABLE_PROFILING
  const em_profiler *prof = m->profiler && m->profiler->record ? m->profiler : NULL;
  if (prof) {
    uint64_t t0 = em_now_ns();
    trace_event(prof, EM_PROFILE_RUN_BEGIN, m->name, -1, 0, t0, t0, NULL);
    em_status st = run_chains(m);
    em_method_unbind_inputs(m);
    trace_event(prof, EM_PROFILE_RUN_END, "Method::execute", -1, 0, t0, em_now_ns(), NULL);
    return st;
  }
#endif
  em_status st = run_chains(m);
  em_method_unbind_inputs(m);
  return st;
}
