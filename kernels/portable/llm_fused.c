/*
 * llm_fused.c — Ember's fused LLM operators (ember:: namespace; python/ember/llm/fused_ops.py
 * defines them for PyTorch, with the reference semantics below):
 *
 *   ember::rms_norm.out(Tensor input, Tensor weight, float eps, *, Tensor(a!) out)
 *       out = input * rsqrt(mean(input * input, -1) + eps) * weight
 *   ember::rope.out(Tensor input, Tensor cos, Tensor sin, *, Tensor(a!) out)
 *       out = input * cos + rotate_half(input) * sin, rotate_half(x) = cat(-x2, x1) of the
 *       last dim's halves; cos / sin broadcast to input (LLMs: [1, S, 1, D] over [B, S, H, D])
 *   ember::swiglu.out(Tensor input, *, Tensor(a!) out)
 *       out = silu(g) * u, g / u the last dim's first / second halves (fused gate / up)
 *
 * Each replaces the chain of portable kernels the decomposed form runs (RMSNorm: 6 operators,
 * RoPE: 7, SwiGLU: split + 3) with one pass over the row and the same arithmetic, operation by
 * operation, as those kernels do: the same f32 roundings in the same order (the mean summed in
 * double, four partial sums, as reduce_sum.c does; sigmoid from the optimized layer's row when
 * it has one, as elementwise_activation.c does), so an exported model gives the same bits
 * either way. f32 only: these are the LLM path's activations (other dtypes are refused).
 */
#include <math.h>

#include "portable/fast_config.h"
#include "portable/nn_util.h"

/* input / out checks shared by the three: f32, contiguous, out resized to `sizes`. */
static em_status f32_rows_args(em_kernel_ctx *ctx, const em_tensor *x, em_tensor *out,
                               const int64_t *sizes, const char *what) {
  NN_CHECK_TENSOR(ctx, x, "input");
  EM_KCHECK(ctx, out, "out must be a tensor");
  EM_KCHECK(ctx, x->dtype == EM_DTYPE_F32 && out->dtype == EM_DTYPE_F32,
            "%s: input and out must be f32 (got %s, %s)", what, em_dtype_name(x->dtype),
            em_dtype_name(out->dtype));
  EM_KCHECK(ctx, x->dim >= 1, "%s: input must have at least one dim", what);
  EM_KCHECK(ctx, em_tensor_is_contiguous_order(x) && em_tensor_is_contiguous_order(out),
            "%s: input and out must be contiguous", what);
  EM_KTRY(em_resize_out(ctx, out, sizes, x->dim));
  EM_KCHECK(ctx, out->numel == 0 || out->data, "out must be a tensor with data");
  return EM_OK;
}

/* Sum of the f32 run p[0..n) of squares x * x (each rounded to f32) in double, four partial
 * sums: what mul.out then mean.out (reduce_sum.c: sum_f32_run) give. */
static double sum_sq_f32(const float *p, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float q0 = p[j] * p[j], q1 = p[j + 1] * p[j + 1];
    const float q2 = p[j + 2] * p[j + 2], q3 = p[j + 3] * p[j + 3];
    s0 += (double)q0;
    s1 += (double)q1;
    s2 += (double)q2;
    s3 += (double)q3;
  }
  for (; j < n; j++) {
    const float q = p[j] * p[j];
    s0 += (double)q;
  }
  return (s0 + s1) + (s2 + s3);
}

em_status em_ember_rms_norm_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *w = EM_ARG_TENSOR(args, 1), *out = EM_ARG_TENSOR(args, 3);
  double eps;
  NN_CHECK_TENSOR(ctx, w, "weight");
  EM_KCHECK(ctx, em_arg_double(args[2], &eps), "rms_norm: eps must be a float");
  EM_KTRY(f32_rows_args(ctx, x, out, x->sizes, "rms_norm"));
  const int64_t d = x->sizes[x->dim - 1];
  EM_KCHECK(ctx, w->dtype == EM_DTYPE_F32 && w->dim == 1 && w->sizes[0] == d,
            "rms_norm: weight must be f32 [%lld] (the input's last dim)", (long long)d);
  EM_KCHECK(ctx, w->strides[0] == 1 || d <= 1, "rms_norm: weight must be contiguous");
  if (x->numel == 0) return EM_OK;
  const float *xp = x->data, *wp = w->data;
  float *op = out->data;
  const float e = (float)eps;
  for (int64_t r = 0; r < x->numel / d; r++) {
    const float *xr = xp + r * d;
    float *orow = op + r * d;
    const float mean = (float)(sum_sq_f32(xr, d) / (double)d);
    const float s = 1.0f / sqrtf(mean + e);
    for (int64_t i = 0; i < d; i++) {
      const float t = xr[i] * s;
      orow[i] = t * wp[i];
    }
  }
  return EM_OK;
}

em_status em_ember_rope_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *c = EM_ARG_TENSOR(args, 1), *s = EM_ARG_TENSOR(args, 2);
  em_tensor *out = EM_ARG_TENSOR(args, 4);
  NN_CHECK_TENSOR(ctx, c, "cos");
  NN_CHECK_TENSOR(ctx, s, "sin");
  EM_KTRY(f32_rows_args(ctx, x, out, x->sizes, "rope"));
  const int64_t d = x->sizes[x->dim - 1], h = d / 2;
  EM_KCHECK(ctx, d % 2 == 0, "rope: the last dim (%lld) must be even", (long long)d);
  EM_KCHECK(ctx, c->dtype == EM_DTYPE_F32 && s->dtype == EM_DTYPE_F32,
            "rope: cos and sin must be f32");
  EM_KCHECK(ctx, c->dim == s->dim && c->dim <= x->dim,
            "rope: cos and sin must have one rank, at most the input's");
  for (int32_t i = 0; i < c->dim; i++) {
    const int64_t xs = x->sizes[x->dim - c->dim + i];
    EM_KCHECK(ctx, c->sizes[i] == s->sizes[i] && (c->sizes[i] == xs || c->sizes[i] == 1),
              "rope: cos / sin dim %d (%lld / %lld) does not broadcast to the input's %lld", i,
              (long long)c->sizes[i], (long long)s->sizes[i], (long long)xs);
  }
  EM_KCHECK(ctx, c->dim >= 1 && c->sizes[c->dim - 1] == d,
            "rope: cos / sin must have the input's last dim (%lld)", (long long)d);
  EM_KCHECK(ctx, c->strides[c->dim - 1] == 1 && s->strides[s->dim - 1] == 1,
            "rope: cos and sin rows must be contiguous");
  if (x->numel == 0) return EM_OK;
  const float *xp = x->data, *cp = c->data, *sp = s->data;
  float *op = out->data;
  for (int64_t r = 0; r < x->numel / d; r++) {
    const float *xr = xp + r * d;
    const float *cr = cp + em_bcast_offset(c, x->sizes, x->dim, r * d);
    const float *sr = sp + em_bcast_offset(s, x->sizes, x->dim, r * d);
    float *orow = op + r * d;
    /* (x * cos) + (cat(-x2, x1) * sin), each product rounded, then the sum: mul, neg, cat, mul,
     * add as the decomposed form runs them */
    for (int64_t i = 0; i < h; i++) {
      const float a = xr[i] * cr[i], b = -xr[i + h] * sr[i];
      orow[i] = a + b;
    }
    for (int64_t i = h; i < d; i++) {
      const float a = xr[i] * cr[i], b = xr[i - h] * sr[i];
      orow[i] = a + b;
    }
  }
  return EM_OK;
}

enum { SWIGLU_CHUNK = 256 };

em_status em_ember_swiglu_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 1);
  NN_CHECK_TENSOR(ctx, x, "input");
  EM_KCHECK(ctx, x->dim >= 1 && x->dim <= EM_MAX_DIM, "swiglu: input must have 1 to %d dims",
            EM_MAX_DIM);
  const int64_t d2 = x->sizes[x->dim - 1], h = d2 / 2;
  EM_KCHECK(ctx, d2 % 2 == 0, "swiglu: the last dim (%lld) must be even", (long long)d2);
  int64_t sizes[EM_MAX_DIM];
  for (int32_t i = 0; i < x->dim; i++) sizes[i] = x->sizes[i];
  sizes[x->dim - 1] = h;
  EM_KTRY(f32_rows_args(ctx, x, out, sizes, "swiglu"));
  if (out->numel == 0) return EM_OK;
  const em_portable_fast_config *cfg = em_portable_fast_config_get();
  const float *xp = x->data;
  float *op = out->data;
  float sig[SWIGLU_CHUNK];
  const int64_t one = 1;
  for (int64_t r = 0; r < x->numel / d2; r++) {
    const float *g = xp + r * d2, *u = g + h;
    float *orow = op + r * h;
    for (int64_t i0 = 0; i0 < h; i0 += SWIGLU_CHUNK) {
      const int64_t n = h - i0 < SWIGLU_CHUNK ? h - i0 : SWIGLU_CHUNK;
      const float *gi = g + i0;
      if (cfg->sigmoid && cfg->sigmoid_row) {
        cfg->sigmoid_row(sig, &gi, &one, n, NULL);
      } else {
        for (int64_t i = 0; i < n; i++) {
          const float a = gi[i];
          sig[i] = a != a ? a : 1.0f / (1.0f + expf(-a));
        }
      }
      /* silu(g) = g * sigmoid(g) (rounded), then times u */
      for (int64_t i = 0; i < n; i++) {
        const float t = gi[i] * sig[i];
        orow[i0 + i] = t * u[i0 + i];
      }
    }
  }
  return EM_OK;
}
