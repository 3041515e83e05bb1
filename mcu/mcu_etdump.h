/*
 * mcu_etdump.h — the firmware's opt-in ETDump (built only with `make -C mcu ETDUMP=1`).
 *
 * mcu_etdump_start() starts the SysTick counter, makes it the platform clock (em_now_ns), starts
 * an em_etdump in a static buffer (and a static debug buffer for intermediate outputs when
 * ETDUMP_DEBUG > 0) and attaches it to the method config, so prepare records "Method::init"
 * and every execute records its instructions. mcu_etdump_write() serializes the ETDump into a
 * static output buffer and writes it (and the debug buffer) to host files over semihosting.
 */
#ifndef EMBER_MCU_ETDUMP_H
#define EMBER_MCU_ETDUMP_H

#include "ember/ember.h"

/* Attaches the writer to cfg->profiler. Returns EM_OK or the writer's error. */
em_status mcu_etdump_start(em_method_config *cfg);
/* Finishes the ETDump and writes the file(s); prints what it wrote. 0 on success, else 2. */
int mcu_etdump_write(void);

#endif /* EMBER_MCU_ETDUMP_H */
