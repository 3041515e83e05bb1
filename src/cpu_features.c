/*
 * cpu_features.c — the one place the library probes the CPU (include/ember/cpu.h).
 *
 * x86: __builtin_cpu_supports for the AVX families; CPUID leaf 7 directly for AMX and the BF16
 * bits (not every compiler's __builtin_cpu_supports knows those names), plus the OS's leave to
 * use the tile registers (em_platform_enable_amx). AArch64: NEON is baseline. Elsewhere (and on
 * bare metal): nothing. The detected set is computed once; the cap is one atomic index, so
 * readers never see a half-written state.
 */
#include <stdatomic.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "ember/cpu.h"
#include "ember/platform.h"

/* Caps, most permissive first; each entry clears what its level may not use. */
enum { CAP_NONE, CAP_AMX, CAP_AVX512F, CAP_AVX2, CAP_NEON, CAP_SCALAR, N_CAPS };
static const char *const cap_names[N_CAPS] = {"none", "amx", "avx512f", "avx2", "neon", "scalar"};

static em_cpu_features detected, capped[N_CAPS];
static atomic_int state; /* 0 not detected, 1 being detected, 2 ready */
static atomic_int cap = CAP_NONE;

static void detect(em_cpu_features *f) {
  memset(f, 0, sizeof *f);
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f->avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f->avx512f = __builtin_cpu_supports("avx512f");
  f->avx512bw = f->avx512f && __builtin_cpu_supports("avx512bw");
  f->avx512vnni = f->avx512f && __builtin_cpu_supports("avx512vnni");
  f->avx512vbmi =
      f->avx512bw && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi");
  unsigned a, b, c, d;
  if (f->avx512f && __get_cpuid(0, &a, &b, &c, &d) && b == 0x68747541u /* "Auth"enticAMD */ &&
      __get_cpuid(1, &a, &b, &c, &d)) {
    const unsigned family = (a >> 8 & 0xF) + ((a >> 8 & 0xF) == 0xF ? (a >> 20 & 0xFF) : 0);
    f->avx512_split = family == 0x19; /* Zen 4; Zen 5 (1Ah) has full 512-bit datapaths */
  }
#endif
#if defined(__x86_64__)
  unsigned a0, b0, c0, d0, a1, b1, c1, d1;
  if (__get_cpuid_count(7, 0, &a0, &b0, &c0, &d0) && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
    f->avx512bf16 = f->avx512f && (a1 >> 5 & 1);
    /* AMX-BF16 (EDX bit 22) and AMX-TILE (bit 24), with AVX-512 BF16 and BW for the operand
       split, and the OS's leave (asked once, here). */
    f->amx_bf16 = (d0 >> 22 & 1) && (d0 >> 24 & 1) && f->avx512bf16 && f->avx512bw &&
                  em_platform_enable_amx();
  }
#endif
#if defined(__aarch64__)
  f->neon = true;
#endif
}

static void ensure_detected(void) {
  if (atomic_load_explicit(&state, memory_order_acquire) == 2) return;
  int zero = 0;
  if (atomic_compare_exchange_strong(&state, &zero, 1)) {
    detect(&detected);
    for (int c = 0; c < N_CAPS; c++) {
      em_cpu_features f = detected;
      if (c >= CAP_AVX512F) f.amx_bf16 = false;
      if (c >= CAP_AVX2)
        f.avx512f = f.avx512bw = f.avx512vnni = f.avx512bf16 = f.avx512_split = f.avx512vbmi =
            false;
      if (c >= CAP_NEON) f.avx2_fma = false;
      if (c >= CAP_SCALAR) f.neon = false;
      capped[c] = f;
    }
    atomic_store_explicit(&state, 2, memory_order_release);
  } else {
    while (atomic_load_explicit(&state, memory_order_acquire) != 2) {
    }
  }
}

const em_cpu_features *em_cpu_features_detected(void) {
  ensure_detected();
  return &detected;
}

const em_cpu_features *em_cpu_features_get(void) {
  ensure_detected();
  return &capped[atomic_load_explicit(&cap, memory_order_acquire)];
}

em_status em_cpu_set_isa_cap(const char *isa) {
  ensure_detected();
  int c = -1;
  if (!isa || !isa[0]) c = CAP_NONE;
  for (int i = 1; c < 0 && i < N_CAPS; i++)
    if (strcmp(isa, cap_names[i]) == 0) c = i;
  const em_cpu_features *d = &detected;
  int ok = c == CAP_NONE || c == CAP_SCALAR || (c == CAP_AMX && d->amx_bf16) ||
           (c == CAP_AVX512F && d->avx512f) || (c == CAP_AVX2 && d->avx2_fma) ||
           (c == CAP_NEON && d->neon);
  if (c < 0 || !ok) {
    EM_LOG_ERROR("ISA cap '%s' is unknown or this CPU lacks it", isa);
    return EM_ERR_NOT_SUPPORTED;
  }
  atomic_store_explicit(&cap, c, memory_order_release);
  return EM_OK;
}

const char *em_cpu_isa_cap(void) {
  return cap_names[atomic_load_explicit(&cap, memory_order_acquire)];
}
