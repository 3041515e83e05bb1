/*
 * mcu_io.h — the firmware's output, exit and work counter over Arm semihosting
 * and SysTick. No stdio, no heap: text is formatted here (integers and floats
 * with 7 significant digits) and written with SYS_WRITE0; whole files (the
 * ETDump of an ETDUMP=1 build) with SYS_OPEN / SYS_WRITE / SYS_CLOSE.
 */
#ifndef EMBER_MCU_IO_H
#define EMBER_MCU_IO_H

#include <stddef.h>
#include <stdint.h>

/* Writes a NUL-terminated string (buffered to the next newline). */
void mcu_puts(const char *s);
/* Writes a signed / unsigned decimal integer. */
void mcu_puti(int64_t v);
void mcu_putu(uint64_t v);
/* Writes a float as [-]d.dddddde[+-]x (7 significant digits), or nan/inf. */
void mcu_putf(float v);
/* Writes data[0..n) to the host file `path` (created or truncated; SYS_OPEN "wb", SYS_WRITE,
 * SYS_CLOSE; a relative path is relative to QEMU's working directory). 0 on success, -1 if the
 * host could not open or write it. */
int mcu_write_file(const char *path, const void *data, size_t n);
/* Flushes pending text and ends the program with `status` (QEMU exits with it). */
void mcu_exit(int status) __attribute__((noreturn));

/*
 * SysTick work counter. Under QEMU with `-icount shift=0` the processor clock
 * advances with executed instructions, so the count is a deterministic proxy
 * for work (not a time). mcu_ticks() is monotonic (wraps handled by the
 * SysTick interrupt).
 */
void mcu_ticks_start(void);
uint64_t mcu_ticks(void);
/* Instructions per SysTick tick, measured once on a loop of known length (0 if unmeasurable). */
uint32_t mcu_instructions_per_tick(void);

#endif /* EMBER_MCU_IO_H */
