/*
 * ember.h — the whole public C API of the Ember runtime in one include.
 *
 *     #include "ember/ember.h"
 *     em_register_prim_ops();
 *     em_register_portable_kernels();
 *     ... em_program_load, em_method_prepare, em_method_execute ...
 */
#ifndef EMBER_EMBER_H
#define EMBER_EMBER_H

#include "ember/allocator.h"
#include "ember/backend.h"
#include "ember/cpu.h"
#include "ember/data_map.h"
#include "ember/etdump.h"
#include "ember/kernel.h"
#include "ember/loader.h"
#include "ember/method.h"
#include "ember/platform.h"
#include "ember/profiler.h"
#include "ember/program.h"
#include "ember/status.h"
#include "ember/tensor.h"
#include "ember/threadpool.h"

#endif /* EMBER_EMBER_H */
