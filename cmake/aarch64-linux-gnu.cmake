# Cross-compile for AArch64 Linux with Debian's gcc-aarch64-linux-gnu and run the
# results under qemu-user (Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross
# qemu-user; cmocka for the tests: dpkg --add-architecture arm64, libcmocka-dev:arm64).
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(FAVOR_AARCH64_SYSROOT /usr/aarch64-linux-gnu)
find_program(FAVOR_QEMU_AARCH64 qemu-aarch64)
if(FAVOR_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${FAVOR_QEMU_AARCH64} -L ${FAVOR_AARCH64_SYSROOT})
endif()
# Libraries and headers of the target: the cross sysroot and Debian's multiarch dirs.
set(CMAKE_FIND_ROOT_PATH ${FAVOR_AARCH64_SYSROOT} /usr/lib/aarch64-linux-gnu)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# pkg-config must look at the arm64 .pc files only.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
