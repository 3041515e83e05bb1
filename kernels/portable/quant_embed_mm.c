/*
 * quant_embed_mm.c — weight-only quantized ops of namespace quantized_decomposed:
 * embedding_byte / embedding_4bit / embedding_2bit (.out and .dtype_out) and
 * mixed_mm.out / mixed_linear.out.
 *
 * Embedding weights are [vocab, packed] bytes: 8-bit weights are int8/uint8
 * values; 4-bit weights hold two values per byte, element 2j in the HIGH
 * nibble and 2j+1 in the low one, each stored +8 (q = nibble - 8); 2-bit
 * weights hold four per byte, LSB first, each stored +2 (executorch's
 * kernels/quantized/cpu/embeddingxb.cpp). Scales (and optional zero points)
 * are [vocab] or [vocab, groups]; value = (q - zp) * scale computed in f32.
 * The mixed ops dequantize int8 weights block by block into f32 scratch and
 * run the f32 GEMM: mixed_mm's scales are per row k of weight [K, N];
 * mixed_linear's are per output row n of weight [N, K], optionally in groups
 * of K / groups columns.
 */
#include "portable/nn_util.h"

#define EMB_OUT_DTYPES (EM_DT_F32 | EM_DT_F16 | EM_DT_BF16 | EM_DT_F64)

static int32_t emb_value(const uint8_t *row, int64_t j, int bits) {
  if (bits == 8) return 0; /* unused: 8-bit values are read with their dtype */
  if (bits == 4) return (int32_t)((j & 1) ? (row[j >> 1] & 0x0F) : (row[j >> 1] >> 4)) - 8;
  return (int32_t)((row[j >> 2] >> (2 * (j & 3))) & 3) - 2;
}

/* Shared body of every embedding_{byte,4bit,2bit} variant; dtype_v may be NULL (.out). */
static em_status embedding_xbit(em_kernel_ctx *ctx, em_evalue **args, int bits, em_evalue *dtype_v,
                                em_tensor *out) {
  em_tensor *w = EM_ARG_TENSOR(args, 0), *s = EM_ARG_TENSOR(args, 1), *idx = EM_ARG_TENSOR(args, 5);
  em_tensor *z = EM_ARG_IS_NONE(args, 2) ? NULL : EM_ARG_TENSOR(args, 2);
  int64_t qmin, qmax;
  NN_CHECK_TENSOR(ctx, w, "weight");
  NN_CHECK_TENSOR(ctx, s, "weight_scales");
  NN_CHECK_TENSOR(ctx, idx, "indices");
  EM_KCHECK(ctx, EM_ARG_IS_NONE(args, 2) || z, "weight_zero_points must be a tensor or None");
  EM_KCHECK(ctx, em_arg_int(args[3], &qmin) && em_arg_int(args[4], &qmax) && qmin <= qmax,
            "bad weight_quant_min/max");
  EM_KCHECK(ctx, w->dim == 2, "weight must be 2-D");
  if (bits == 8)
    EM_KCHECK(ctx, w->dtype == EM_DTYPE_I8 || w->dtype == EM_DTYPE_U8, "weight must be int8/uint8");
  else
    EM_KCHECK(ctx, w->dtype == EM_DTYPE_U8, "packed weight must be uint8");
  EM_KCHECK(ctx,
            em_dtype_is_float(s->dtype) && (s->dim == 1 || s->dim == 2) &&
                s->sizes[0] == w->sizes[0],
            "weight_scales must be a float [vocab] or [vocab, groups] tensor");
  int64_t D = w->sizes[1] * (8 / bits), G = s->dim == 2 ? s->sizes[1] : 1;
  EM_KCHECK(ctx, G > 0 && D % G == 0, "groups %lld must divide the embedding dim %lld",
            (long long)G, (long long)D);
  if (z) {
    EM_KCHECK(ctx, z->data || z->numel == 0, "weight_zero_points has no data");
    EM_KCHECK(ctx, z->dim == s->dim && z->numel == s->numel,
              "weight_zero_points must have the shape of weight_scales");
  }
  EM_KCHECK(ctx, idx->dtype == EM_DTYPE_I64 || idx->dtype == EM_DTYPE_I32,
            "indices must be int64 or int32");
  EM_KCHECK(ctx, out && (EMB_OUT_DTYPES & EM_DTYPE_BIT(out->dtype)) != 0,
            "out must be a float tensor");
  if (dtype_v && dtype_v->tag != EM_TAG_NONE) {
    int64_t dt;
    EM_KCHECK(ctx, em_arg_int(dtype_v, &dt) && dt == out->dtype, "dtype must match out's dtype");
  }
  EM_KCHECK(ctx, out->dim == idx->dim + 1, "out must have rank %d", (int)(idx->dim + 1));
  int64_t sz[EM_MAX_DIM];
  for (int32_t d = 0; d < idx->dim; d++) sz[d] = idx->sizes[d];
  sz[idx->dim] = D;
  EM_KTRY(em_resize_out(ctx, out, sz, idx->dim + 1));
  int64_t V = w->sizes[0], gs = D / G;
  EM_KCHECK(ctx, bits == 8 || w->strides[1] == 1, "packed weight rows must be contiguous");
  for (int64_t i = 0; i < idx->numel; i++) {
    int64_t k = em_load_i64(idx->data, idx->dtype, em_strided_offset(idx, i));
    EM_KCHECK(ctx, k >= 0 && k < V, "index %lld out of range [0, %lld)", (long long)k,
              (long long)V);
    const uint8_t *row =
        (const uint8_t *)w->data + k * w->strides[0] * (int64_t)em_dtype_size(w->dtype);
    int64_t ob = 0, rem = i;
    for (int32_t d = idx->dim - 1; d >= 0; d--) {
      ob += (rem % out->sizes[d]) * out->strides[d];
      rem /= out->sizes[d];
    }
    for (int64_t g = 0; g < G; g++) {
      int64_t pi = s->dim == 2 ? k * s->strides[0] + g * s->strides[1] : k * s->strides[0];
      float scale = (float)em_load_f64(s->data, s->dtype, pi);
      float zp = 0.0f;
      if (z) {
        int64_t zi = z->dim == 2 ? k * z->strides[0] + g * z->strides[1] : k * z->strides[0];
        zp = (float)em_load_f64(z->data, z->dtype, zi);
      }
      for (int64_t j = g * gs; j < (g + 1) * gs; j++) {
        float q = bits == 8
                      ? (float)em_load_i64(w->data, w->dtype, k * w->strides[0] + j * w->strides[1])
                      : (float)emb_value(row, j, bits);
        em_store_f64(out->data, out->dtype, ob + j * out->strides[idx->dim], (q - zp) * scale);
      }
    }
  }
  return EM_OK;
}

/* embedding_byte.out(weight, weight_scales, weight_zero_points?, quant_min, quant_max, indices, *,
 * out) */
em_status em_qd_embedding_byte_out(em_kernel_ctx *ctx, em_evalue **args) {
  return embedding_xbit(ctx, args, 8, NULL, EM_ARG_TENSOR(args, 6));
}

/* embedding_byte.dtype_out(..., indices, *, ScalarType? dtype=None, Tensor(a!) out) */
em_status em_qd_embedding_byte_dtype_out(em_kernel_ctx *ctx, em_evalue **args) {
  return embedding_xbit(ctx, args, 8, args[6], EM_ARG_TENSOR(args, 7));
}

/* embedding_4bit.out(weight, weight_scales, weight_zero_points?, quant_min, quant_max, indices, *,
 * out) */
em_status em_qd_embedding_4bit_out(em_kernel_ctx *ctx, em_evalue **args) {
  return embedding_xbit(ctx, args, 4, NULL, EM_ARG_TENSOR(args, 6));
}

/* embedding_4bit.dtype_out(..., indices, ScalarType? dtype=None, *, Tensor(a!) out) */
em_status em_qd_embedding_4bit_dtype_out(em_kernel_ctx *ctx, em_evalue **args) {
  return embedding_xbit(ctx, args, 4, args[6], EM_ARG_TENSOR(args, 7));
}

/* embedding_2bit.out(weight, weight_scales, weight_zero_points?, quant_min, quant_max, indices, *,
 * out) */
em_status em_qd_embedding_2bit_out(em_kernel_ctx *ctx, em_evalue **args) {
  return embedding_xbit(ctx, args, 2, NULL, EM_ARG_TENSOR(args, 6));
}

/* embedding_2bit.dtype_out(..., indices, ScalarType? dtype=None, *, Tensor(a!) out) */
em_status em_qd_embedding_2bit_dtype_out(em_kernel_ctx *ctx, em_evalue **args) {
  return embedding_xbit(ctx, args, 2, args[6], EM_ARG_TENSOR(args, 7));
}

/* ---- mixed_mm / mixed_linear ---- */

/* Rows of weight dequantized per block so scratch stays bounded (in floats). */
#define MIXED_BLOCK (1 << 20)

/*
 * out[M, N] = x[M, K] @ Wd where Wd is the dequantized weight viewed as [K, N]:
 * linear: W is [N, K], Wd[k, n] = (W[n, k] - zp[n, g]) * s[n, g], g = k / (K / G);
 * mm:     W is [K, N], Wd[k, n] = (W[k, n] - zp[k]) * s[k].
 */
static em_status mixed(em_kernel_ctx *ctx, em_tensor *x, em_tensor *w, em_tensor *s, em_tensor *z,
                       em_tensor *out, bool linear) {
  int64_t M = x->sizes[0], K = x->sizes[1], N = linear ? w->sizes[0] : w->sizes[1];
  int64_t G = linear && s->dim == 2 ? s->sizes[1] : 1;
  int64_t gs = G ? (K + G - 1) / G : K;
  int64_t sz[2] = {M, N};
  EM_KTRY(em_resize_out(ctx, out, sz, 2));
  if (M == 0 || N == 0) return EM_OK;
  float *xf = NULL, *of = NULL;
  nn_mat a = {x->data, x->strides[0], x->strides[1]};
  if (x->dtype != EM_DTYPE_F32) {
    xf = nn_temp(ctx, M * K, sizeof(float));
    NN_CHECK_ALLOC(ctx, xf);
    for (int64_t i = 0; i < M; i++)
      for (int64_t k = 0; k < K; k++)
        xf[i * K + k] =
            (float)em_load_f64(x->data, x->dtype, i * x->strides[0] + k * x->strides[1]);
    a = (nn_mat){xf, K, 1};
  }
  nn_mat c = {out->data, out->strides[0], out->strides[1]};
  if (out->dtype != EM_DTYPE_F32) {
    of = nn_temp(ctx, M * N, sizeof(float));
    NN_CHECK_ALLOC(ctx, of);
    c = (nn_mat){of, N, 1};
  }
  int64_t nb = K > 0 ? MIXED_BLOCK / K : N;
  if (nb < 16) nb = 16;
  if (nb > N) nb = N;
  nb = nn_temp_fit(ctx, (K > 0 ? K : 1) * (int64_t)sizeof(float), nb);
  float *wd = nn_temp(ctx, (K > 0 ? K : 1) * nb, sizeof(float)); /* [K, nb] */
  NN_CHECK_ALLOC(ctx, wd);
  for (int64_t n0 = 0; n0 < N; n0 += nb) {
    int64_t n1 = n0 + nb < N ? n0 + nb : N, w_n = n1 - n0;
    for (int64_t k = 0; k < K; k++)
      for (int64_t n = n0; n < n1; n++) {
        int64_t q = linear ? em_load_i64(w->data, w->dtype, n * w->strides[0] + k * w->strides[1])
                           : em_load_i64(w->data, w->dtype, k * w->strides[0] + n * w->strides[1]);
        int64_t li = linear ? (s->dim == 2 ? n * G + k / gs : n) : k; /* qparam index */
        float zp = z ? (float)em_load_f64(z->data, z->dtype, em_strided_offset(z, li)) : 0.0f;
        float sc = (float)em_load_f64(s->data, s->dtype, em_strided_offset(s, li));
        wd[k * w_n + (n - n0)] = ((float)q - zp) * sc;
      }
    nn_mat cb = {c.p + n0 * c.cs, c.rs, c.cs};
    EM_KTRY(nn_sgemm(ctx, M, w_n, K, a, (nn_mat){wd, w_n, 1}, cb, false));
  }
  if (of)
    for (int64_t i = 0; i < M; i++)
      for (int64_t n = 0; n < N; n++)
        em_store_f64(out->data, out->dtype, i * out->strides[0] + n * out->strides[1],
                     of[i * N + n]);
  return EM_OK;
}

static em_status mixed_checks(em_kernel_ctx *ctx, em_tensor *x, em_tensor *w, em_tensor *s,
                              em_tensor *z, em_tensor *out) {
  NN_CHECK_TENSOR(ctx, x, "input");
  NN_CHECK_TENSOR(ctx, w, "weight");
  NN_CHECK_TENSOR(ctx, s, "weight_scales");
  EM_KCHECK(ctx, x->dim == 2 && w->dim == 2, "input and weight must be 2-D");
  EM_KCHECK(ctx, em_dtype_is_float(x->dtype) && x->dtype != EM_DTYPE_F64,
            "input must be f32, f16 or bf16");
  EM_KCHECK(ctx, w->dtype == EM_DTYPE_I8, "weight must be int8");
  EM_KCHECK(ctx, em_dtype_is_float(s->dtype), "weight_scales must be floating point");
  if (z) {
    EM_KCHECK(ctx, z->data || z->numel == 0, "weight_zero_points has no data");
    EM_KCHECK(ctx, z->numel == s->numel, "weight_zero_points must match weight_scales");
  }
  EM_KCHECK(ctx,
            out && out->dim == 2 && em_dtype_is_float(out->dtype) && out->dtype != EM_DTYPE_F64,
            "out must be a 2-D f32/f16/bf16 tensor");
  return EM_OK;
}

/* mixed_mm.out(Tensor input, Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, *,
 * out) */
em_status em_qd_mixed_mm_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *w = EM_ARG_TENSOR(args, 1), *s = EM_ARG_TENSOR(args, 2),
            *out = EM_ARG_TENSOR(args, 4);
  em_tensor *z = EM_ARG_IS_NONE(args, 3) ? NULL : EM_ARG_TENSOR(args, 3);
  EM_KTRY(mixed_checks(ctx, x, w, s, z, out));
  EM_KCHECK(ctx, x->sizes[1] == w->sizes[0], "input columns must equal weight rows");
  EM_KCHECK(ctx, s->dim == 1 && s->sizes[0] == w->sizes[0], "weight_scales must be [K]");
  EM_KCHECK(ctx, out->dtype == x->dtype, "out dtype must match input");
  return mixed(ctx, x, w, s, z, out, false);
}

/*
 * mixed_linear.out(Tensor input, Tensor weight, Tensor weight_scales, Tensor? weight_zero_points,
 *   ScalarType? dtype=None, *, Tensor(a!) out)
 */
em_status em_qd_mixed_linear_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *w = EM_ARG_TENSOR(args, 1), *s = EM_ARG_TENSOR(args, 2),
            *out = EM_ARG_TENSOR(args, 5);
  em_tensor *z = EM_ARG_IS_NONE(args, 3) ? NULL : EM_ARG_TENSOR(args, 3);
  int64_t dt;
  EM_KTRY(mixed_checks(ctx, x, w, s, z, out));
  EM_KCHECK(ctx, x->sizes[1] == w->sizes[1], "input columns must equal weight columns");
  EM_KCHECK(ctx, (s->dim == 1 || s->dim == 2) && s->sizes[0] == w->sizes[0],
            "weight_scales must be [N] or [N, groups]");
  EM_KCHECK(ctx, s->dim == 1 || s->sizes[1] > 0, "weight_scales needs at least one group");
  EM_KCHECK(ctx, nn_opt_int(args[4], out->dtype, &dt) && dt == out->dtype,
            "dtype must match out's dtype");
  return mixed(ctx, x, w, s, z, out, true);
}
