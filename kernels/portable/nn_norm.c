/*
 * nn_norm.c — normalization: aten::_native_batch_norm_legit_no_training.out,
 * _native_batch_norm_legit.out / .no_stats_out, native_layer_norm.out and
 * native_group_norm.out.
 *
 * Statistics are computed in double (two passes: mean, then the biased
 * variance of the centred values), and the normalized value as
 * (x - mean) * rstd * weight + bias, rounded once to the output dtype. All
 * tensors are read through their strides. Inference batch norm folds each
 * channel to out = x * scale + shift and has an f32 path over rows.
 * ATen's statistic outputs: batch norm without training gives [0]-sized
 * save_mean/save_invstd; layer norm's are [leading dims..., 1...]; group
 * norm's are [N, group].
 */
#include "portable/nn_util.h"

/* Offset of logical element i of the sub-shape dims [d0, dim) of t. */
static int64_t sub_offset(const em_tensor *t, int32_t d0, int64_t i) {
  int64_t off = 0;
  for (int32_t d = t->dim - 1; d >= d0; d--) {
    off += (i % t->sizes[d]) * t->strides[d];
    i /= t->sizes[d];
  }
  return off;
}

/* Offset of index `o` over the leading dims [0, d1) of t. */
static int64_t lead_offset(const em_tensor *t, int32_t d1, int64_t o) {
  int64_t off = 0;
  for (int32_t d = d1 - 1; d >= 0; d--) {
    off += (o % t->sizes[d]) * t->strides[d];
    o /= t->sizes[d];
  }
  return off;
}

static bool float_or_null(const em_tensor *t) { return !t || em_dtype_is_float(t->dtype); }

/* Optional per-channel tensor argument: None, or a 1-D float tensor of n elements. */
static em_status opt_channel(em_kernel_ctx *ctx, em_evalue **args, int i, int64_t n,
                             em_tensor **out, const char *name) {
  *out = NULL;
  if (EM_ARG_IS_NONE(args, i)) return EM_OK;
  em_tensor *t = EM_ARG_TENSOR(args, i);
  NN_CHECK_TENSOR(ctx, t, name);
  EM_KCHECK(ctx, em_dtype_is_float(t->dtype), "%s must be floating point", name);
  EM_KCHECK(ctx, t->numel == n, "%s must have %lld elements, has %lld", name, (long long)n,
            (long long)t->numel);
  *out = t;
  return EM_OK;
}

static double ld(const em_tensor *t, int64_t i) {
  return em_load_f64(t->data, t->dtype, em_strided_offset(t, i));
}

/*
 * out[n, c, ...] = x * scale[c] + shift[c] for every element, c = dim 1
 * (the whole tensor is one channel when rank < 2).
 */
static void channel_affine(const em_tensor *x, em_tensor *out, const double *scale,
                           const double *shift) {
  int32_t dim = x->dim;
  int64_t inner = dim > 0 ? x->sizes[dim - 1] : 1;
  if (inner == 0) return;
  int64_t rows = x->numel / inner;
  int64_t xs = dim > 0 ? x->strides[dim - 1] : 1, os = dim > 0 ? out->strides[dim - 1] : 1;
  bool f32 = x->dtype == EM_DTYPE_F32 && out->dtype == EM_DTYPE_F32;
  for (int64_t r = 0; r < rows; r++) {
    int64_t xo = lead_offset(x, dim - 1, r), oo = lead_offset(out, dim - 1, r);
    int64_t c = 0;
    if (dim >= 3) {
      int64_t below = 1;
      for (int32_t d = 2; d < dim - 1; d++) below *= x->sizes[d];
      c = (r / below) % x->sizes[1];
    }
    if (dim == 2) { /* channel is the inner dim */
      for (int64_t j = 0; j < inner; j++) {
        double v = em_load_f64(x->data, x->dtype, xo + j * xs) * scale[j] + shift[j];
        em_store_f64(out->data, out->dtype, oo + j * os, v);
      }
      continue;
    }
    if (f32) {
      const float *xp = (const float *)x->data + xo;
      float *op = (float *)out->data + oo;
      float a = (float)scale[c], b = (float)shift[c];
      for (int64_t j = 0; j < inner; j++) op[j * os] = xp[j * xs] * a + b;
    } else {
      for (int64_t j = 0; j < inner; j++) {
        double v = em_load_f64(x->data, x->dtype, xo + j * xs) * scale[c] + shift[c];
        em_store_f64(out->data, out->dtype, oo + j * os, v);
      }
    }
  }
}

/* Per-channel mean and biased variance of x (channel = dim 1) over all other dims. */
static void channel_stats(const em_tensor *x, double *mean, double *var) {
  int64_t C = x->sizes[1], spatial = 1;
  for (int32_t d = 2; d < x->dim; d++) spatial *= x->sizes[d];
  int64_t n = C ? x->numel / C : 0;
  for (int64_t k = 0; k < C; k++) mean[k] = var[k] = 0.0;
  for (int64_t i = 0; i < x->numel; i++) mean[(i / spatial) % C] += ld(x, i);
  for (int64_t k = 0; k < C; k++) mean[k] /= (double)(n ? n : 1);
  for (int64_t i = 0; i < x->numel; i++) {
    double d = ld(x, i) - mean[(i / spatial) % C];
    var[(i / spatial) % C] += d * d;
  }
  for (int64_t k = 0; k < C; k++) var[k] /= (double)(n ? n : 1);
}

/* Shared front end of the batch norms: checks input/out and the optional weight and bias. */
static em_status bn_front(em_kernel_ctx *ctx, em_evalue **args, em_tensor *x, em_tensor *out,
                          em_tensor **w, em_tensor **b) {
  NN_CHECK_TENSOR(ctx, x, "input");
  EM_KCHECK(ctx, x->dim >= 2, "input must have at least 2 dims, has %d", (int)(x->dim));
  EM_KCHECK(ctx, em_dtype_is_float(x->dtype), "input must be floating point");
  EM_KCHECK(ctx, out && out->dtype == x->dtype, "out must be a tensor of the input dtype");
  EM_KTRY(opt_channel(ctx, args, 1, x->sizes[1], w, "weight"));
  EM_KTRY(opt_channel(ctx, args, 2, x->sizes[1], b, "bias"));
  EM_KCHECK(ctx, out->dim == x->dim, "out must have the input's rank");
  return em_resize_out(ctx, out, x->sizes, x->dim);
}

/* Normalizes x with per-channel mean and invstd into out, applying weight/bias. */
static em_status bn_apply(em_kernel_ctx *ctx, const em_tensor *x, em_tensor *out,
                          const double *mean, const double *invstd, const em_tensor *w,
                          const em_tensor *b) {
  int64_t C = x->sizes[1];
  double *scale = nn_temp(ctx, 2 * (C ? C : 1), sizeof(double));
  NN_CHECK_ALLOC(ctx, scale);
  double *shift = scale + C;
  for (int64_t c = 0; c < C; c++) {
    double wv = w ? ld(w, c) : 1.0, bv = b ? ld(b, c) : 0.0;
    scale[c] = invstd[c] * wv;
    shift[c] = bv - mean[c] * scale[c];
  }
  channel_affine(x, out, scale, shift);
  return EM_OK;
}

/*
 * ATen returns [0]-sized save_mean/save_invstd from inference batch norm. The
 * outputs carry no data, so a planned tensor that cannot shrink to [0] (a
 * static one of another shape) is left as it is rather than failing the op.
 */
static em_status resize_empty(em_kernel_ctx *ctx, em_tensor *t, const char *name) {
  EM_KCHECK(ctx, t && t->dim == 1, "%s must be a 1-D tensor", name);
  int64_t z = 0;
  (void)em_tensor_resize(t, &z, 1);
  return EM_OK;
}

/* Inference normalization with running statistics (shared by no_training and legit). */
static em_status bn_inference(em_kernel_ctx *ctx, em_tensor *x, em_tensor *out, em_tensor *w,
                              em_tensor *b, em_tensor *rm, em_tensor *rv, double eps) {
  int64_t C = x->sizes[1];
  double *st = nn_temp(ctx, 2 * (C ? C : 1), sizeof(double));
  NN_CHECK_ALLOC(ctx, st);
  for (int64_t c = 0; c < C; c++) {
    st[c] = ld(rm, c);
    st[C + c] = 1.0 / sqrt(ld(rv, c) + eps);
  }
  return bn_apply(ctx, x, out, st, st + C, w, b);
}

static em_status running_stat(em_kernel_ctx *ctx, em_evalue **args, int i, int64_t C, em_tensor **t,
                              const char *name) {
  *t = EM_ARG_TENSOR(args, i);
  NN_CHECK_TENSOR(ctx, *t, name);
  EM_KCHECK(ctx, em_dtype_is_float((*t)->dtype) && (*t)->numel == C,
            "%s must be a float tensor of %lld elements", name, (long long)C);
  return EM_OK;
}

/*
 * aten::_native_batch_norm_legit_no_training.out(Tensor input, Tensor? weight, Tensor? bias,
 *   Tensor running_mean, Tensor running_var, float momentum, float eps, *, out0, out1, out2)
 */
em_status em__native_batch_norm_legit_no_training_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 7), *w, *b, *rm, *rv;
  double eps;
  EM_KTRY(bn_front(ctx, args, x, out, &w, &b));
  EM_KTRY(running_stat(ctx, args, 3, x->sizes[1], &rm, "running_mean"));
  EM_KTRY(running_stat(ctx, args, 4, x->sizes[1], &rv, "running_var"));
  EM_KCHECK(ctx, em_arg_double(args[6], &eps), "eps must be a float");
  EM_KTRY(resize_empty(ctx, EM_ARG_TENSOR(args, 8), "out1"));
  EM_KTRY(resize_empty(ctx, EM_ARG_TENSOR(args, 9), "out2"));
  return bn_inference(ctx, x, out, w, b, rm, rv, eps);
}

/* Training-mode batch norm: batch statistics, save_mean/save_invstd, optional running update. */
static em_status bn_training(em_kernel_ctx *ctx, em_tensor *x, em_tensor *out, em_tensor *w,
                             em_tensor *b, em_tensor *rm, em_tensor *rv, double momentum,
                             double eps, em_tensor *save_mean, em_tensor *save_invstd) {
  int64_t C = x->sizes[1], n = x->numel / (C ? C : 1);
  EM_KCHECK(ctx,
            save_mean && save_invstd && save_mean->dim == 1 && save_invstd->dim == 1 &&
                float_or_null(save_mean) && float_or_null(save_invstd),
            "save_mean and save_invstd must be 1-D float tensors");
  EM_KTRY(em_resize_out(ctx, save_mean, &C, 1));
  EM_KTRY(em_resize_out(ctx, save_invstd, &C, 1));
  double *st = nn_temp(ctx, 3 * (C ? C : 1), sizeof(double));
  NN_CHECK_ALLOC(ctx, st);
  double *mean = st, *var = st + C, *inv = st + 2 * C;
  channel_stats(x, mean, var);
  for (int64_t c = 0; c < C; c++) {
    inv[c] = 1.0 / sqrt(var[c] + eps);
    em_store_f64(save_mean->data, save_mean->dtype, c * save_mean->strides[0], mean[c]);
    em_store_f64(save_invstd->data, save_invstd->dtype, c * save_invstd->strides[0], inv[c]);
    if (rm) {
      int64_t mi = em_strided_offset(rm, c), vi = em_strided_offset(rv, c);
      double unbiased = n > 1 ? var[c] * (double)n / (double)(n - 1) : var[c];
      em_store_f64(rm->data, rm->dtype, mi,
                   (1.0 - momentum) * em_load_f64(rm->data, rm->dtype, mi) + momentum * mean[c]);
      em_store_f64(rv->data, rv->dtype, vi,
                   (1.0 - momentum) * em_load_f64(rv->data, rv->dtype, vi) + momentum * unbiased);
    }
  }
  return bn_apply(ctx, x, out, mean, inv, w, b);
}

/*
 * aten::_native_batch_norm_legit.out(Tensor input, Tensor? weight, Tensor? bias,
 *   Tensor(a!) running_mean, Tensor(b!) running_var, bool training, float momentum,
 *   float eps, *, out, save_mean, save_invstd)
 */
em_status em__native_batch_norm_legit_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 8), *w, *b, *rm, *rv;
  bool training;
  double momentum, eps;
  EM_KTRY(bn_front(ctx, args, x, out, &w, &b));
  EM_KTRY(running_stat(ctx, args, 3, x->sizes[1], &rm, "running_mean"));
  EM_KTRY(running_stat(ctx, args, 4, x->sizes[1], &rv, "running_var"));
  EM_KCHECK(ctx, em_arg_bool(args[5], &training), "training must be a bool");
  EM_KCHECK(ctx, em_arg_double(args[6], &momentum) && em_arg_double(args[7], &eps),
            "momentum and eps must be floats");
  if (!training) {
    EM_KTRY(resize_empty(ctx, EM_ARG_TENSOR(args, 9), "save_mean"));
    EM_KTRY(resize_empty(ctx, EM_ARG_TENSOR(args, 10), "save_invstd"));
    return bn_inference(ctx, x, out, w, b, rm, rv, eps);
  }
  return bn_training(ctx, x, out, w, b, rm, rv, momentum, eps, EM_ARG_TENSOR(args, 9),
                     EM_ARG_TENSOR(args, 10));
}

/*
 * aten::_native_batch_norm_legit.no_stats_out(Tensor input, Tensor? weight, Tensor? bias,
 *   bool training, float momentum, float eps, *, out, save_mean, save_invstd)
 */
em_status em__native_batch_norm_legit_no_stats_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 6), *w, *b;
  bool training;
  double momentum, eps;
  EM_KTRY(bn_front(ctx, args, x, out, &w, &b));
  EM_KCHECK(ctx, em_arg_bool(args[3], &training), "training must be a bool");
  EM_KCHECK(ctx, training, "batch norm without running stats needs training=True");
  EM_KCHECK(ctx, em_arg_double(args[4], &momentum) && em_arg_double(args[5], &eps),
            "momentum and eps must be floats");
  return bn_training(ctx, x, out, w, b, NULL, NULL, momentum, eps, EM_ARG_TENSOR(args, 7),
                     EM_ARG_TENSOR(args, 8));
}

/*
 * aten::native_layer_norm.out(Tensor input, SymInt[] normalized_shape, Tensor? weight,
 *   Tensor? bias, float eps, *, out0, out1, out2)
 */
em_status em_native_layer_norm_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 5),
            *mo = EM_ARG_TENSOR(args, 6), *ro = EM_ARG_TENSOR(args, 7), *w, *b;
  NN_CHECK_TENSOR(ctx, x, "input");
  EM_KCHECK(ctx, em_dtype_is_float(x->dtype), "input must be floating point");
  size_t nn = 0;
  const int64_t *ns = em_evalue_int_list(args[1], &nn);
  EM_KCHECK(ctx, ns && nn >= 1 && (int32_t)nn <= x->dim, "bad normalized_shape");
  int32_t lead = x->dim - (int32_t)nn;
  int64_t N = 1;
  for (size_t i = 0; i < nn; i++) {
    EM_KCHECK(ctx, x->sizes[lead + i] == ns[i], "normalized_shape does not match the input");
    N *= ns[i];
  }
  EM_KTRY(opt_channel(ctx, args, 2, N, &w, "weight"));
  EM_KTRY(opt_channel(ctx, args, 3, N, &b, "bias"));
  double eps;
  EM_KCHECK(ctx, em_arg_double(args[4], &eps), "eps must be a float");
  EM_KCHECK(ctx,
            out && mo && ro && out->dtype == x->dtype && em_dtype_is_float(mo->dtype) &&
                em_dtype_is_float(ro->dtype),
            "out must match the input dtype; mean and rstd must be float tensors");
  EM_KCHECK(ctx, out->dim == x->dim && mo->dim == x->dim && ro->dim == x->dim,
            "outputs must have the input's rank");
  int64_t ssz[EM_MAX_DIM];
  for (int32_t d = 0; d < x->dim; d++) ssz[d] = d < lead ? x->sizes[d] : 1;
  EM_KTRY(em_resize_out(ctx, out, x->sizes, x->dim));
  EM_KTRY(em_resize_out(ctx, mo, ssz, x->dim));
  EM_KTRY(em_resize_out(ctx, ro, ssz, x->dim));
  int64_t M = 1;
  for (int32_t d = 0; d < lead; d++) M *= x->sizes[d];
  bool f32 = x->dtype == EM_DTYPE_F32 && nn_is_contiguous(x) && nn_is_contiguous(out);
  /* weight/bias as contiguous f32 (None: 1 and 0) for the typed path; NULL when not possible */
  const float *wf = NULL, *bf = NULL;
  if (f32) {
    float *tmp = nn_temp(ctx, 2 * (N ? N : 1), sizeof(float));
    if (tmp) {
      for (int64_t j = 0; j < N; j++) {
        tmp[j] = w ? (float)ld(w, j) : 1.0f;
        tmp[N + j] = b ? (float)ld(b, j) : 0.0f;
      }
      wf = tmp;
      bf = tmp + N;
    }
  }
  for (int64_t m = 0; m < M; m++) {
    int64_t xo = lead_offset(x, lead, m), oo = lead_offset(out, lead, m);
    double mean = 0.0, var = 0.0;
    if (f32) {
      const float *xp = (const float *)x->data + xo;
      for (int64_t j = 0; j < N; j++) mean += xp[j];
      mean /= (double)N;
      for (int64_t j = 0; j < N; j++) var += (xp[j] - mean) * (xp[j] - mean);
    } else {
      for (int64_t j = 0; j < N; j++)
        mean += em_load_f64(x->data, x->dtype, xo + sub_offset(x, lead, j));
      mean = N ? mean / (double)N : 0.0;
      for (int64_t j = 0; j < N; j++) {
        double d = em_load_f64(x->data, x->dtype, xo + sub_offset(x, lead, j)) - mean;
        var += d * d;
      }
    }
    var = N ? var / (double)N : 0.0;
    double rstd = 1.0 / sqrt(var + eps);
    em_store_f64(mo->data, mo->dtype, lead_offset(mo, lead, m), mean);
    em_store_f64(ro->data, ro->dtype, lead_offset(ro, lead, m), rstd);
    if (f32 && wf && bf) { /* typed path: f32 rows, weight and bias as contiguous f32 */
      const float *xp = (const float *)x->data + xo;
      float *op = (float *)out->data + oo;
      float mf = (float)mean, rf = (float)rstd;
      for (int64_t j = 0; j < N; j++) op[j] = (xp[j] - mf) * rf * wf[j] + bf[j];
      continue;
    }
    for (int64_t j = 0; j < N; j++) {
      double v =
          (em_load_f64(x->data, x->dtype, xo + (f32 ? j : sub_offset(x, lead, j))) - mean) * rstd;
      if (w) v *= ld(w, j);
      if (b) v += ld(b, j);
      em_store_f64(out->data, out->dtype, oo + (f32 ? j : sub_offset(out, lead, j)), v);
    }
  }
  return EM_OK;
}

/* native_group_norm over contiguous f32 input and output: the generic loop's steps and double
 * arithmetic, with the floats read and written in place (the generic loop's per-element strided
 * offsets and dtype switches took ~35 ns an element: 9 ms for a 1x64x64x64 map). */
static void group_norm_f32(const float *x, float *y, const em_tensor *w, const em_tensor *b,
                           em_tensor *mo, em_tensor *ro, int64_t N, int64_t C, int64_t HxW,
                           int64_t G, double eps) {
  const int64_t cg = C / G, D = cg * HxW;
  for (int64_t n = 0; n < N; n++)
    for (int64_t g = 0; g < G; g++) {
      const int64_t base = (n * C + g * cg) * HxW;
      const float *xg = x + base;
      double mean = 0.0, var = 0.0;
      for (int64_t j = 0; j < D; j++) mean += xg[j];
      mean = D ? mean / (double)D : 0.0;
      for (int64_t j = 0; j < D; j++) {
        double d = xg[j] - mean;
        var += d * d;
      }
      var = D ? var / (double)D : 0.0;
      double rstd = 1.0 / sqrt(var + eps);
      em_store_f64(mo->data, mo->dtype, n * mo->strides[0] + g * mo->strides[1], mean);
      em_store_f64(ro->data, ro->dtype, n * ro->strides[0] + g * ro->strides[1], rstd);
      for (int64_t k = 0; k < cg; k++) {
        const int64_t c = g * cg + k;
        const double wc = w ? ld(w, c) : 1.0, bc = b ? ld(b, c) : 0.0;
        const float *xc = xg + k * HxW;
        float *yc = y + base + k * HxW;
        for (int64_t j = 0; j < HxW; j++) {
          double v = (xc[j] - mean) * rstd;
          if (w) v *= wc;
          if (b) v += bc;
          yc[j] = (float)v;
        }
      }
    }
}

/*
 * aten::native_group_norm.out(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C,
 *   SymInt HxW, int group, float eps, *, out0, out1, out2)
 */
em_status em_native_group_norm_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 8),
            *mo = EM_ARG_TENSOR(args, 9), *ro = EM_ARG_TENSOR(args, 10), *w, *b;
  int64_t N, C, HxW, G;
  double eps;
  NN_CHECK_TENSOR(ctx, x, "input");
  EM_KCHECK(ctx, em_dtype_is_float(x->dtype), "input must be floating point");
  EM_KCHECK(ctx,
            em_arg_int(args[3], &N) && em_arg_int(args[4], &C) && em_arg_int(args[5], &HxW) &&
                em_arg_int(args[6], &G) && em_arg_double(args[7], &eps),
            "N, C, HxW, group must be ints and eps a float");
  EM_KCHECK(ctx, x->dim >= 2 && x->sizes[0] == N && x->sizes[1] == C && N * C * HxW == x->numel,
            "input shape does not match N, C, HxW");
  EM_KCHECK(ctx, G > 0 && C % G == 0, "channels %lld not divisible by %lld groups", (long long)C,
            (long long)G);
  EM_KTRY(opt_channel(ctx, args, 1, C, &w, "weight"));
  EM_KTRY(opt_channel(ctx, args, 2, C, &b, "bias"));
  EM_KCHECK(ctx,
            out && mo && ro && out->dtype == x->dtype && em_dtype_is_float(mo->dtype) &&
                em_dtype_is_float(ro->dtype) && out->dim == x->dim && mo->dim == 2 && ro->dim == 2,
            "out must match the input; mean and rstd must be 2-D float tensors");
  int64_t ssz[2] = {N, G};
  EM_KTRY(em_resize_out(ctx, out, x->sizes, x->dim));
  EM_KTRY(em_resize_out(ctx, mo, ssz, 2));
  EM_KTRY(em_resize_out(ctx, ro, ssz, 2));
  int64_t cg = C / G, D = cg * HxW; /* elements per (n, group), contiguous in logical order */
  if (x->dtype == EM_DTYPE_F32 && nn_is_contiguous(x) && nn_is_contiguous(out)) {
    group_norm_f32(x->data, out->data, w, b, mo, ro, N, C, HxW, G, eps);
    return EM_OK;
  }
  for (int64_t n = 0; n < N; n++)
    for (int64_t g = 0; g < G; g++) {
      int64_t base = (n * C + g * cg) * HxW;
      double mean = 0.0, var = 0.0;
      for (int64_t j = 0; j < D; j++) mean += ld(x, base + j);
      mean = D ? mean / (double)D : 0.0;
      for (int64_t j = 0; j < D; j++) {
        double d = ld(x, base + j) - mean;
        var += d * d;
      }
      var = D ? var / (double)D : 0.0;
      double rstd = 1.0 / sqrt(var + eps);
      em_store_f64(mo->data, mo->dtype, n * mo->strides[0] + g * mo->strides[1], mean);
      em_store_f64(ro->data, ro->dtype, n * ro->strides[0] + g * ro->strides[1], rstd);
      for (int64_t j = 0; j < D; j++) {
        int64_t c = g * cg + j / (HxW ? HxW : 1);
        double v = (ld(x, base + j) - mean) * rstd;
        if (w) v *= ld(w, c);
        if (b) v += ld(b, c);
        em_store_f64(out->data, out->dtype, em_strided_offset(out, base + j), v);
      }
    }
  return EM_OK;
}
