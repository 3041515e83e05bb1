/*
 * cpu_ops.c — the CPU backend's operator dispatch: emc_op_check (the checks every operator
 * shares, then its kind's) and emc_op_run, each a switch over the emc_op kinds calling the
 * families' emc_check_* / emc_run_* (cpu_ops.h):
 *
 *   conv2d            cpu_op_conv.c (paths), cpu_op_dwconv.c, cpu_op_wino.c, cpu_op_smallc.c,
 *                     cpu_op_im2col.c (im2col, padded input, transposes)
 *   gemm              cpu_op_gemm.c (the driver: cpu_gemm.c)
 *   binary, unary, copy, channel affine      cpu_op_eltwise.c
 *   max / avg pool, resize                   cpu_op_pool.c
 *   mean, softmax, layer / RMS norm, per-token / per-tensor fake-quant   cpu_op_rows.c
 *   permute, cat, slice, pad, embedding, gather   cpu_op_shape.c
 *   dynamic int8 linear                      cpu_op_dqlinear.c
 *   fused chains      cpu_op_chain.c (emc_fuse_chain, emc_run_chain)
 */
#include "cpu_ops.h"

bool emc_op_check(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  for (int i = 0; i < 4; i++)
    if (op->in[i] < -1 || op->in[i] >= (int32_t)d->n_tensors) WHY("input id %d", op->in[i]);
  for (int i = 0; i < 2; i++)
    if (op->out[i] < -1 || op->out[i] >= (int32_t)d->n_tensors) WHY("output id %d", op->out[i]);
  if (op->out[0] < 0) WHY("operator has no output");
  if (d->t[op->out[0]].storage == EMC_CONST || d->t[op->out[0]].storage == EMC_INPUT)
    WHY("operator writes a constant or an input");
  for (int i = 0; i < 4; i++) /* integer tensors: only an embedding's indices */
    if (op->in[i] >= 0 && d->t[op->in[i]].dtype != EMC_DTYPE_F32 &&
        !(op->kind == EMC_OP_EMBEDDING && i == 1))
      WHY("input %d is an integer tensor", i);
  switch (op->kind) {
  case EMC_OP_CONV2D: return emc_check_conv(d, op, why, why_n);
  case EMC_OP_GEMM: return emc_check_gemm(d, op, why, why_n);
  case EMC_OP_BINARY: return emc_check_binary(d, op, why, why_n);
  case EMC_OP_UNARY:
  case EMC_OP_COPY: return emc_check_unary(d, op, why, why_n);
  case EMC_OP_MAXPOOL2D:
  case EMC_OP_AVGPOOL2D: return emc_check_pool(d, op, why, why_n);
  case EMC_OP_MEAN: return emc_check_mean(d, op, why, why_n);
  case EMC_OP_SOFTMAX: return emc_check_softmax(d, op, why, why_n);
  case EMC_OP_LAYERNORM:
  case EMC_OP_RMSNORM: return emc_check_norm(d, op, why, why_n);
  case EMC_OP_TOKEN_FQ: return emc_check_token_fq(d, op, why, why_n);
  case EMC_OP_TENSOR_FQ: return emc_check_tensor_fq(d, op, why, why_n);
  case EMC_OP_PERMUTE: return emc_check_permute(d, op, why, why_n);
  case EMC_OP_CAT: return emc_check_cat(d, op, why, why_n);
  case EMC_OP_SLICE: return emc_check_slice(d, op, why, why_n);
  case EMC_OP_PAD: return emc_check_pad(d, op, why, why_n);
  case EMC_OP_CHANNEL_AFFINE: return emc_check_affine(d, op, why, why_n);
  case EMC_OP_DQ_LINEAR: return emc_check_dq_linear(d, op, why, why_n);
  case EMC_OP_EMBEDDING: return emc_check_embedding(d, op, why, why_n);
  case EMC_OP_RESIZE: return emc_check_resize(d, op, why, why_n);
  case EMC_OP_GATHER: return emc_check_gather(d, op, why, why_n);
  default: WHY("unknown operator kind %u", op->kind);
  }
}

em_status emc_op_run(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  switch (op->kind) {
  case EMC_OP_CONV2D: return emc_run_conv(d, op, pool);
  case EMC_OP_GEMM: return emc_run_gemm(d, op, pool);
  case EMC_OP_BINARY: return emc_run_binary(d, op, pool);
  case EMC_OP_UNARY:
  case EMC_OP_COPY: return emc_run_unary(d, op, pool);
  case EMC_OP_MAXPOOL2D:
  case EMC_OP_AVGPOOL2D: return emc_run_pool(d, op, pool);
  case EMC_OP_MEAN:
  case EMC_OP_SOFTMAX:
  case EMC_OP_LAYERNORM:
  case EMC_OP_RMSNORM:
  case EMC_OP_TOKEN_FQ: return emc_run_rows(d, op, pool);
  case EMC_OP_TENSOR_FQ: return emc_run_tensor_fq(d, op, pool);
  case EMC_OP_PERMUTE: return emc_run_permute(d, op, pool);
  case EMC_OP_CAT: return emc_run_cat(d, op);
  case EMC_OP_SLICE: return emc_run_slice(d, op, pool);
  case EMC_OP_PAD: return emc_run_pad(d, op, pool);
  case EMC_OP_CHANNEL_AFFINE: return emc_run_affine(d, op, pool);
  case EMC_OP_DQ_LINEAR: return emc_run_dq_linear(d, op, pool);
  case EMC_OP_EMBEDDING: return emc_run_embedding(d, op, pool);
  case EMC_OP_RESIZE: return emc_run_resize(d, op, pool);
  case EMC_OP_GATHER: return emc_run_gather(d, op, pool);
  default: return EM_ERR_INVALID_PROGRAM;
  }
}
