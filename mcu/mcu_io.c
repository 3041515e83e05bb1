/*
 * mcu_io.c — semihosting output and exit, a tiny number formatter, and the
 * SysTick counter (see mcu_io.h). Semihosting calls are `bkpt 0xAB` with the
 * operation in r0 and its argument in r1 (Arm semihosting spec v2).
 */
#include "mcu_io.h"

#include <stddef.h>

#define SYS_OPEN                     0x01
#define SYS_CLOSE                    0x02
#define SYS_WRITE0                   0x04
#define SYS_WRITE                    0x05
#define SYS_OPEN_MODE_WB             5 /* "wb": create or truncate, binary */
#define SYS_EXIT_EXTENDED            0x20
#define ADP_STOPPED_APPLICATION_EXIT 0x20026

static uint32_t semihost(uint32_t op, const void *arg) {
  register uint32_t r0 __asm("r0") = op;
  register const void *r1 __asm("r1") = arg;
  __asm volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

static char g_line[160];
static size_t g_len;

static void flush(void) {
  if (!g_len) return;
  g_line[g_len] = '\0';
  semihost(SYS_WRITE0, g_line);
  g_len = 0;
}

static void putc_(char c) {
  g_line[g_len++] = c;
  if (c == '\n' || g_len == sizeof g_line - 1) flush();
}

void mcu_puts(const char *s) {
  while (*s) putc_(*s++);
}

void mcu_putu(uint64_t v) {
  char buf[24];
  int n = 0;
  do {
    buf[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) putc_(buf[--n]);
}

void mcu_puti(int64_t v) {
  if (v < 0) {
    putc_('-');
    mcu_putu((uint64_t)0 - (uint64_t)v);
  } else {
    mcu_putu((uint64_t)v);
  }
}

/* Float to 7 significant digits without libm or printf (single precision math only). */
void mcu_putf(float v) {
  if (v != v) {
    mcu_puts("nan");
    return;
  }
  if (v < 0 || (v == 0 && 1 / v < 0)) {
    putc_('-');
    v = -v;
  }
  if (v > 3.4e38f) {
    mcu_puts("inf");
    return;
  }
  int e = 0;
  if (v != 0) {
    while (v >= 10.0f) v /= 10.0f, e++;
    while (v < 1.0f) v *= 10.0f, e--;
  }
  uint32_t digits = (uint32_t)(v * 1000000.0f + 0.5f); /* 7 digits: d.dddddd */
  if (digits >= 10000000u) digits /= 10, e++;
  char buf[8];
  for (int i = 6; i >= 0; i--) buf[i] = (char)('0' + digits % 10), digits /= 10;
  putc_(buf[0]);
  putc_('.');
  for (int i = 1; i < 7; i++) putc_(buf[i]);
  putc_('e');
  putc_(e < 0 ? '-' : '+');
  mcu_putu((uint64_t)(e < 0 ? -e : e));
}

/* SYS_OPEN "wb", SYS_WRITE (returns the bytes NOT written), SYS_CLOSE: binary-safe. */
int mcu_write_file(const char *path, const void *data, size_t n) {
  size_t len = 0;
  while (path[len]) len++;
  uint32_t open_args[3] = {(uint32_t)(uintptr_t)path, SYS_OPEN_MODE_WB, (uint32_t)len};
  uint32_t fd = semihost(SYS_OPEN, open_args);
  if (fd == 0xFFFFFFFFu) return -1;
  uint32_t write_args[3] = {fd, (uint32_t)(uintptr_t)data, (uint32_t)n};
  uint32_t left = n ? semihost(SYS_WRITE, write_args) : 0;
  uint32_t close_args[1] = {fd};
  uint32_t closed = semihost(SYS_CLOSE, close_args);
  return left == 0 && closed == 0 ? 0 : -1;
}

void mcu_exit(int status) {
  flush();
  uint32_t block[2] = {ADP_STOPPED_APPLICATION_EXIT, (uint32_t)status};
  semihost(SYS_EXIT_EXTENDED, block);
  for (;;) {
  }
}

/* ---- SysTick (ARMv8-M: SYST_CSR 0xE000E010, RVR +4, CVR +8) ---- */
#define SYST_CSR    (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR    (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR    (*(volatile uint32_t *)0xE000E018u)
#define SYST_RELOAD 0xFFFFFFu

static volatile uint32_t g_wraps;

void SysTick_Handler(void);
void SysTick_Handler(void) { g_wraps++; }

void mcu_ticks_start(void) {
  SYST_CSR = 0;
  SYST_RVR = SYST_RELOAD;
  SYST_CVR = 0;
  g_wraps = 0;
  SYST_CSR = 7; /* processor clock, interrupt on wrap, enable */
}

uint64_t mcu_ticks(void) {
  uint32_t w, cvr;
  do {
    w = g_wraps;
    cvr = SYST_CVR;
  } while (w != g_wraps);
  return (uint64_t)w * (SYST_RELOAD + 1u) + (SYST_RELOAD - cvr);
}

/* Two instructions per iteration (subs + bne). With -icount shift=0 QEMU's clock advances one
 * nanosecond per instruction, so the ratio is constant (measured 50 on QEMU 7.2 mps2-an505: a 20
 * MHz SysTick clock). */
uint32_t mcu_instructions_per_tick(void) {
  static uint32_t ratio;
  if (ratio) return ratio;
  uint32_t n = 200000;
  uint64_t t0 = mcu_ticks();
  __asm volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(n));
  uint64_t dt = mcu_ticks() - t0;
  ratio = dt ? (uint32_t)((400000u + dt / 2) / dt) : 0;
  return ratio;
}
