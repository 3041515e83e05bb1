/*
 * nn_embed_bag.c — aten::_embedding_bag.out and _embedding_bag_forward_only.out
 * (nn.EmbeddingBag, F.embedding_bag; the second when the weight does not require
 * grad): per-bag sum, mean or max of embedding rows, with ATen's four outputs.
 *
 * Bag b holds indices [offsets[b], offsets[b + 1]) (the last bag runs to the end
 * of indices; with include_last_offset the last offset only closes the last bag
 * in ATen's "fast path", see below). Entries equal to padding_idx are skipped.
 * Values follow ATen's CPU kernel (EmbeddingBag.cpp):
 *
 *   output      [B, D]: sum (times per_sample_weights when given), mean (sum /
 *               max(bag_size, 1), divided in the weight's dtype), or max
 *               (first winner kept on ties, a NaN row value only when it comes
 *               first, as ATen's `>` compare); empty bags give 0.
 *               f16/bf16/f32 accumulate in float, f64 in double; bf16 sums of the
 *               fast path round half away from zero (FBGEMM's conversion, x86).
 *   offset2bag  [N] bag of each index, or [0] in the sum fast path (ATen skips it).
 *   bag_size    [B] entries per bag minus padded ones (mean, max); zeros (sum).
 *               forward_only: [len(offsets)], as PyTorch's shape function (its CPU
 *               kernel differs with include_last_offset), the entry past B 0.
 *   max_indices [B, D] the winning row per element (max; 0 for empty bags),
 *               [B] a copy of bag_size (sum, mean).
 *
 * ATen's fast path (sum or mean with f32/f16/bf16 weights whose rows are
 * contiguous, contiguous per_sample_weights, padding_idx < 0) sums each bag up to
 * the next offset including the last offset given with include_last_offset;
 * its slow path (and max) assigns every index after the last used offset to the
 * last bag. Both are reproduced; bag_size always counts up to the end of indices.
 * Offsets must start at 0, be non-decreasing and stay within [0, N] (ATen only
 * checks the first and last; non-monotonic offsets are refused here).
 */
#include "portable/nn_util.h"

enum { MODE_SUM = 0, MODE_MEAN = 1, MODE_MAX = 2 };

/* Element i of a 1-D integer tensor. */
static int64_t at1(const em_tensor *t, int64_t i) {
  return em_load_i64(t->data, t->dtype, i * t->strides[0]);
}

static bool is_index_dtype(int dt) { return dt == EM_DTYPE_I64 || dt == EM_DTYPE_I32; }

/* a / b computed as ATen's in-place division of a `dt` tensor (float math below f64). */
static double div_as(int dt, double a, double b) {
  return dt == EM_DTYPE_F64 ? a / b : (double)((float)a / (float)b);
}

/*
 * Stores a float sum as bf16 the way ATen's fast path does on x86 (FBGEMM's conversion):
 * round half away from zero on the bit pattern, not to nearest even.
 */
static void store_bf16_half_up(void *data, int64_t i, float v) {
  if (isnan(v)) {
    em_store_f64(data, EM_DTYPE_BF16, i, (double)v);
    return;
  }
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  ((uint16_t *)data)[i] = (uint16_t)((bits + 0x8000u) >> 16);
}

/* Both operators; `fwd_only`: _embedding_bag_forward_only (bag_size sized by offsets). */
static em_status embedding_bag(em_kernel_ctx *ctx, em_evalue **args, bool fwd_only) {
  em_tensor *w = EM_ARG_TENSOR(args, 0), *ind = EM_ARG_TENSOR(args, 1),
            *offs = EM_ARG_TENSOR(args, 2), *psw = NULL, *out = EM_ARG_TENSOR(args, 9),
            *o2b = EM_ARG_TENSOR(args, 10), *bsz = EM_ARG_TENSOR(args, 11),
            *mxi = EM_ARG_TENSOR(args, 12);
  bool scale_grad, sparse, last;
  int64_t mode, pad;
  NN_CHECK_TENSOR(ctx, w, "weight");
  NN_CHECK_TENSOR(ctx, ind, "indices");
  NN_CHECK_TENSOR(ctx, offs, "offsets");
  EM_KCHECK(ctx, em_arg_bool(args[3], &scale_grad), "scale_grad_by_freq must be a bool");
  EM_KCHECK(ctx, em_arg_int(args[4], &mode), "mode must be an int");
  EM_KCHECK(ctx, em_arg_bool(args[5], &sparse), "sparse must be a bool");
  EM_KCHECK(ctx, em_arg_bool(args[7], &last), "include_last_offset must be a bool");
  EM_KCHECK(ctx, em_arg_int(args[8], &pad), "padding_idx must be an int");
  EM_KCHECK(ctx, mode >= MODE_SUM && mode <= MODE_MAX, "mode must be 0 (sum), 1 (mean) or 2 (max)");
  EM_KCHECK(ctx, w->dim == 2, "weight must be 2-D, got %d-D", (int)(w->dim));
  EM_KCHECK(ctx, em_dtype_is_float(w->dtype), "weight dtype %s is not a float dtype",
            em_dtype_name(w->dtype));
  EM_KCHECK(ctx, ind->dim == 1, "indices must be 1-D, got %d-D", (int)(ind->dim));
  EM_KCHECK(ctx, offs->dim == 1, "offsets must be 1-D, got %d-D", (int)(offs->dim));
  EM_KCHECK(ctx, is_index_dtype(ind->dtype) && is_index_dtype(offs->dtype),
            "indices and offsets must be int32 or int64");
  if (!EM_ARG_IS_NONE(args, 6)) {
    psw = EM_ARG_TENSOR(args, 6);
    NN_CHECK_TENSOR(ctx, psw, "per_sample_weights");
    EM_KCHECK(ctx, mode == MODE_SUM, "per_sample_weights only supported with mode='sum'");
    EM_KCHECK(ctx, psw->dtype == w->dtype, "per_sample_weights must have the weight's dtype");
    EM_KCHECK(ctx, psw->dim == 1 && psw->numel == ind->numel,
              "per_sample_weights must be 1-D with one weight per index");
  }
  int64_t V = w->sizes[0], D = w->sizes[1], N = ind->sizes[0], NO = offs->sizes[0];
  EM_KCHECK(ctx, !last || NO >= 1, "include_last_offset: number of offsets should be at least 1");
  int64_t B = last ? NO - 1 : NO; /* bags */
  for (int64_t b = 0; b < NO; b++) {
    int64_t o = at1(offs, b);
    EM_KCHECK(ctx, b > 0 || o == 0, "offsets[0] has to be 0, got %lld", (long long)o);
    EM_KCHECK(ctx, o <= N, "offsets[%lld] = %lld is greater than the number of indices %lld",
              (long long)b, (long long)o, (long long)N);
    EM_KCHECK(ctx, b == 0 || o >= at1(offs, b - 1), "offsets must be non-decreasing");
  }
  bool fast = (w->dtype == EM_DTYPE_F32 || w->dtype == EM_DTYPE_F16 || w->dtype == EM_DTYPE_BF16) &&
              w->strides[1] == 1 && (!psw || psw->strides[0] == 1) && pad < 0;
  bool fast_sum = fast && mode == MODE_SUM;
  /* The slow path puts indices before the first offset in bag -1: none only when B > 0. */
  EM_KCHECK(ctx, B > 0 || N == 0 || (fast && mode != MODE_MAX),
            "%lld indices but no bags (offsets is empty)", (long long)N);

  EM_KCHECK(ctx, out && o2b && bsz && mxi, "out0..out3 must be tensors");
  EM_KCHECK(ctx, out->dtype == w->dtype && out->dim == 2, "out0 must be 2-D of the weight dtype");
  EM_KCHECK(ctx,
            is_index_dtype(o2b->dtype) && is_index_dtype(bsz->dtype) && is_index_dtype(mxi->dtype),
            "out1..out3 must be int32 or int64");
  EM_KCHECK(ctx, o2b->dim == 1 && bsz->dim == 1 && mxi->dim == (mode == MODE_MAX ? 2 : 1),
            "out1, out2 must be 1-D and out3 %d-D", mode == MODE_MAX ? 2 : 1);
  int64_t osz[2] = {B, D}, n2b = fast_sum ? 0 : N;
  EM_KTRY(em_resize_out(ctx, out, osz, 2));
  EM_KTRY(em_resize_out(ctx, o2b, &n2b, 1));
  int64_t nbs = fwd_only ? NO : B; /* bag_size entries (past B: 0) */
  EM_KTRY(em_resize_out(ctx, bsz, &nbs, 1));
  EM_KTRY(em_resize_out(ctx, mxi, osz, mode == MODE_MAX ? 2 : 1));

  /* offset2bag: the number of used offsets (all but the last with include_last_offset)
   * at or before each index, minus one. */
  for (int64_t i = 0, j = 0; i < n2b; i++) {
    while (j < B && at1(offs, j) <= i) j++;
    em_store_i64(o2b->data, o2b->dtype, i * o2b->strides[0], j - 1);
  }

  int dt = w->dtype;
  bool f64 = dt == EM_DTYPE_F64;
  const int64_t ws0 = w->strides[0], ws1 = w->strides[1];
  for (int64_t b = 0; b < B; b++) {
    int64_t start = at1(offs, b), stop = b + 1 < B ? at1(offs, b + 1) : N;
    /* Entries this bag reduces: the fast path stops at the last offset it was given. */
    int64_t end = (b + 1 == B && last && fast && mode != MODE_MAX) ? at1(offs, b + 1) : stop;
    int64_t count = stop - start;
    for (int64_t i = start; i < stop; i++) {
      int64_t k = at1(ind, i);
      /* Checked where read (ATen's fast path never reads past its last offset). */
      EM_KCHECK(ctx, i >= end || (k >= 0 && k < V),
                "expected idx >= 0 && idx < num_embeddings (%lld) but found idx %lld at %lld",
                (long long)V, (long long)k, (long long)i);
      if (k == pad) count--;
    }
    int64_t ob = b * out->strides[0], os1 = out->strides[1];
    for (int64_t d = 0; d < D; d++) {
      if (mode == MODE_MAX) {
        double best = 0.0;
        int64_t arg = 0;
        bool first = true;
        for (int64_t i = start; i < end; i++) {
          int64_t k = at1(ind, i);
          if (k == pad) continue;
          double v = em_load_f64(w->data, dt, k * ws0 + d * ws1);
          if (first || v > best) {
            best = v;
            arg = k;
            first = false;
          }
        }
        em_store_f64(out->data, dt, ob + d * os1, best);
        em_store_i64(mxi->data, mxi->dtype, b * mxi->strides[0] + d * mxi->strides[1], arg);
        continue;
      }
      double accd = 0.0;
      float accf = 0.0f;
      for (int64_t i = start; i < end; i++) {
        int64_t k = at1(ind, i);
        if (k == pad) continue;
        double v = em_load_f64(w->data, dt, k * ws0 + d * ws1);
        double s = psw ? em_load_f64(psw->data, dt, i * psw->strides[0]) : 1.0;
        if (f64)
          accd += psw ? v * s : v;
        else
          accf += psw ? (float)v * (float)s : (float)v;
      }
      if (dt == EM_DTYPE_BF16 && fast)
        store_bf16_half_up(out->data, ob + d * os1, accf);
      else
        em_store_f64(out->data, dt, ob + d * os1, f64 ? accd : (double)accf);
      if (mode == MODE_MEAN) {
        double sum = em_load_f64(out->data, dt, ob + d * os1);
        em_store_f64(out->data, dt, ob + d * os1, div_as(dt, sum, (double)(count > 1 ? count : 1)));
      }
    }
    int64_t bs = mode == MODE_SUM ? 0 : count;
    em_store_i64(bsz->data, bsz->dtype, b * bsz->strides[0], bs);
    if (mode != MODE_MAX) em_store_i64(mxi->data, mxi->dtype, b * mxi->strides[0], bs);
  }
  for (int64_t b = B; b < nbs; b++) em_store_i64(bsz->data, bsz->dtype, b * bsz->strides[0], 0);
  return EM_OK;
}

/*
 * aten::_embedding_bag.out(Tensor weight, Tensor indices, Tensor offsets,
 *   bool scale_grad_by_freq=False, int mode=0, bool sparse=False,
 *   Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1, *,
 *   Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out2, Tensor(d!) out3)
 */
em_status em__embedding_bag_out(em_kernel_ctx *ctx, em_evalue **args) {
  return embedding_bag(ctx, args, false);
}

/* aten::_embedding_bag_forward_only.out: the same arguments (F.embedding_bag on a weight
 * that does not require grad). */
em_status em__embedding_bag_forward_only_out(em_kernel_ctx *ctx, em_evalue **args) {
  return embedding_bag(ctx, args, true);
}
