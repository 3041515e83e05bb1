/*
 * startup.c — reset and fault handling for the Cortex-M33 firmware (no OS, no
 * C runtime start files: the firmware links with -nostartfiles).
 *
 * Reset: copy .data and .tdata from flash, zero .bss and .tbss, enable the FPU
 * for hard-float builds (CPACR bits 20–23), open newlib's semihosting handles,
 * run main() and exit with its status through semihosting (QEMU then exits
 * with that status). A fault prints its name and exits with status 99, so a
 * crash under QEMU ends the run instead of hanging it.
 */
#include <stdint.h>
#include <stdlib.h>

#include "mcu_io.h"

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _estack;
extern uint32_t _sitdata, _stdata, _etdata, _stbss, _etbss;
extern uint8_t __tls_base[];

int main(void);
void initialise_monitor_handles(void);
void Reset_Handler(void);

static void copy_words(uint32_t *dst, const uint32_t *src, const uint32_t *end) {
  while (dst < end) *dst++ = *src++;
}

static void zero_words(uint32_t *dst, const uint32_t *end) {
  while (dst < end) *dst++ = 0;
}

void Reset_Handler(void) {
  copy_words(&_sdata, &_sidata, &_edata);
  copy_words(&_stdata, &_sitdata, &_etdata);
  zero_words(&_sbss, &_ebss);
  zero_words(&_stbss, &_etbss);
#if defined(__ARM_FP)
  /* CP10 and CP11 full access (Cortex-M33 TRM / ARMv8-M ARM, CPACR). */
  *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
  __asm volatile("dsb\n\tisb" ::: "memory");
#endif
  initialise_monitor_handles();
  exit(main());
}

/*
 * The ARM EABI thread pointer: the TLS block follows an 8-byte thread control
 * block, so TP = block - 8 (local-exec offsets are computed by the linker from
 * that rule). One thread, one block.
 */
void *__aeabi_read_tp(void);
__attribute__((naked)) void *__aeabi_read_tp(void) {
  __asm volatile("ldr r0, =__tls_base\n\t"
                 "subs r0, r0, #8\n\t"
                 "bx lr\n\t"
                 ".ltorg");
}

/* newlib may reference these with -nostartfiles. */
void _init(void) {}
void _fini(void) {}

static void fault(const char *what) {
  mcu_puts("FAULT: ");
  mcu_puts(what);
  mcu_puts("\n");
  mcu_exit(99);
}

static void NMI_Handler(void) { fault("NMI"); }
/* Prints the faulting PC and LR (from the stacked frame) and the fault status registers. */
void hardfault_report(const uint32_t *frame);
void hardfault_report(const uint32_t *frame) {
  mcu_puts("FAULT: HardFault pc=");
  mcu_putu(frame[6]);
  mcu_puts(" lr=");
  mcu_putu(frame[5]);
  mcu_puts(" cfsr=");
  mcu_putu(*(volatile uint32_t *)0xE000ED28u);
  mcu_puts(" hfsr=");
  mcu_putu(*(volatile uint32_t *)0xE000ED2Cu);
  mcu_puts(" bfar=");
  mcu_putu(*(volatile uint32_t *)0xE000ED38u);
  mcu_puts("\n");
  mcu_exit(99);
}

__attribute__((naked)) static void HardFault_Handler(void) {
  __asm volatile("tst lr, #4\n\t"
                 "ite eq\n\t"
                 "mrseq r0, msp\n\t"
                 "mrsne r0, psp\n\t"
                 "b hardfault_report\n\t");
}
static void MemManage_Handler(void) { fault("MemManage"); }
static void BusFault_Handler(void) { fault("BusFault"); }
static void UsageFault_Handler(void) { fault("UsageFault"); }
static void SecureFault_Handler(void) { fault("SecureFault"); }
static void Default_Handler(void) { fault("unexpected interrupt"); }
void SysTick_Handler(void);

typedef void (*vector_fn)(void);

__attribute__((section(".isr_vector"), used)) const vector_fn g_vectors[16 + 16] = {
    (vector_fn)&_estack,
    Reset_Handler,
    NMI_Handler,
    HardFault_Handler,
    MemManage_Handler,
    BusFault_Handler,
    UsageFault_Handler,
    SecureFault_Handler,
    0,
    0,
    0,
    Default_Handler, /* SVCall */
    Default_Handler, /* DebugMonitor */
    0,
    Default_Handler, /* PendSV */
    SysTick_Handler,
    /* the first 16 external interrupts: none is enabled */
    Default_Handler,
    Default_Handler,
    Default_Handler,
    Default_Handler,
    Default_Handler,
    Default_Handler,
    Default_Handler,
    Default_Handler,
    Default_Handler,
    Default_Handler,
    Default_Handler,
    Default_Handler,
    Default_Handler,
    Default_Handler,
    Default_Handler,
    Default_Handler,
};
