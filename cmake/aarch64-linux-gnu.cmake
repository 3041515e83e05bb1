# aarch64-linux-gnu.cmake — cross-compiles Ember for 64-bit Arm Linux with Debian's cross gcc
# (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross), for the NEON micro-kernels of the CPU backend.
#
#   cmake -S . -B build-neon -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#   qemu-aarch64 -L /usr/aarch64-linux-gnu build-neon/tests/test_cpu_ukernels_gemm
#
# Executables are linked dynamically against the cross libc (libc6-arm64-cross); qemu-user finds
# its loader and libraries through -L (or QEMU_LD_PREFIX). Not -static: test_no_alloc replaces
# malloc/free, which a static glibc defines again in the same object as its internals. `make
# test-neon` does both steps. NEON (Advanced SIMD) is part of the AArch64 baseline, so no -m flag
# is needed and the binaries run on any ARMv8-A CPU.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# ctest in the cross build directory runs the tests through qemu.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
