/*
 * mcu_etdump.c — ExecuTorch ETDump from the firmware (ETDUMP=1; see mcu_etdump.h).
 *
 * Everything is static: the writer's event buffer (MCU_ETDUMP_BYTES), the serialized file
 * (MCU_ETDUMP_OUT_BYTES) and the optional debug buffer of intermediate outputs
 * (MCU_ETDUMP_DEBUG_BYTES, 0 = off). The files go to the host paths MCU_ETDUMP_PATH and
 * MCU_ETDUMP_DEBUG_PATH (set by mcu/Makefile) with semihosting SYS_OPEN "wb" / SYS_WRITE.
 *
 * Times: the platform clock is the SysTick counter times the measured instructions per tick.
 * Under QEMU with `-icount shift=0` that is QEMU's virtual nanoseconds, i.e. instructions
 * executed (resolution: one tick, ~50 instructions); on a real part it would be cycles-ish
 * units, not ns, unless SysTick runs at 1 GHz.
 */
#include "mcu_etdump.h"

#include <stdint.h>

#include "ember/etdump.h"
#include "mcu_io.h"

#ifndef MCU_ETDUMP_BYTES
#define MCU_ETDUMP_BYTES 16384
#endif
#ifndef MCU_ETDUMP_OUT_BYTES
#define MCU_ETDUMP_OUT_BYTES 16384
#endif
#ifndef MCU_ETDUMP_DEBUG_BYTES
#define MCU_ETDUMP_DEBUG_BYTES 0
#endif
#ifndef MCU_ETDUMP_PATH
#define MCU_ETDUMP_PATH "etdump.etdp"
#endif
#ifndef MCU_ETDUMP_DEBUG_PATH
#define MCU_ETDUMP_DEBUG_PATH MCU_ETDUMP_PATH ".debug.bin"
#endif

static uint8_t g_etdump_mem[MCU_ETDUMP_BYTES] __attribute__((aligned(16)));
static uint8_t g_etdump_out[MCU_ETDUMP_OUT_BYTES] __attribute__((aligned(16)));
#if MCU_ETDUMP_DEBUG_BYTES > 0
static uint8_t g_etdump_debug[MCU_ETDUMP_DEBUG_BYTES] __attribute__((aligned(64)));
#endif
static em_etdump *g_etdump;
static em_profiler g_profiler;
static uint32_t g_ns_per_tick = 1;

static uint64_t systick_now_ns(void) { return mcu_ticks() * g_ns_per_tick; }

em_status mcu_etdump_start(em_method_config *cfg) {
  mcu_ticks_start();
  /* SysTick loads its reload value on the first tick after it is enabled; until then the
   * counter reads 0 (mcu_ticks() a maximum). Wait for the load so the clock is monotonic. */
  uint64_t first = mcu_ticks();
  while (mcu_ticks() == first) {
  }
  uint32_t ratio = mcu_instructions_per_tick();
  g_ns_per_tick = ratio ? ratio : 1;
  em_platform_hooks hooks = *em_platform_get();
  hooks.now_ns = systick_now_ns;
  em_platform_set(&hooks);
  em_status st = em_etdump_init(g_etdump_mem, sizeof g_etdump_mem, &g_etdump);
  if (st != EM_OK) return st;
  em_etdump_attach(g_etdump, &g_profiler);
#if MCU_ETDUMP_DEBUG_BYTES > 0
  em_etdump_set_debug_buffer(g_etdump, g_etdump_debug, sizeof g_etdump_debug);
#endif
  cfg->profiler = &g_profiler;
  return EM_OK;
}

int mcu_etdump_write(void) {
  size_t n = 0;
  em_status st = em_etdump_finish(g_etdump, g_etdump_out, sizeof g_etdump_out, &n);
  if (st != EM_OK) {
    mcu_puts("error: etdump: ");
    mcu_puts(em_status_str(st));
    mcu_puts(st == EM_ERR_OUT_OF_RESOURCES ? ": the output buffer is too small, need " : " ");
    mcu_putu(n);
    mcu_puts(" B (make ETDUMP_OUT_BYTES=...)\n");
    return 2;
  }
  if (mcu_write_file(MCU_ETDUMP_PATH, g_etdump_out, n) != 0) {
    mcu_puts("error: etdump: cannot write " MCU_ETDUMP_PATH "\n");
    return 2;
  }
#if MCU_ETDUMP_DEBUG_BYTES > 0
  size_t dn = em_etdump_debug_size(g_etdump);
  if (mcu_write_file(MCU_ETDUMP_DEBUG_PATH, g_etdump_debug, dn) != 0) {
    mcu_puts("error: etdump: cannot write " MCU_ETDUMP_DEBUG_PATH "\n");
    return 2;
  }
  mcu_puts("etdump: intermediate outputs -> " MCU_ETDUMP_DEBUG_PATH " (");
  mcu_putu(dn);
  mcu_puts(" bytes)\n");
#endif
  mcu_puts("etdump: ");
  mcu_putu(em_etdump_event_count(g_etdump));
  mcu_puts(" events in ");
  mcu_putu(em_etdump_run_count(g_etdump));
  mcu_puts(" runs");
  if (em_etdump_dropped(g_etdump)) {
    mcu_puts(" (");
    mcu_putu(em_etdump_dropped(g_etdump));
    mcu_puts(" DROPPED: buffer full, raise ETDUMP_BYTES or ETDUMP_DEBUG)");
  }
  mcu_puts(" -> " MCU_ETDUMP_PATH " (");
  mcu_putu(n);
  mcu_puts(" bytes; times: SysTick ticks x ");
  mcu_putu(g_ns_per_tick);
  mcu_puts(" = QEMU icount ns)\n");
  return 0;
}
