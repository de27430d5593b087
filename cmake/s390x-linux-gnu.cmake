# Cross-compile for big-endian s390x Linux with Debian's gcc-s390x-linux-gnu and run
# the results under qemu-user (Debian: gcc-s390x-linux-gnu libc6-dev-s390x-cross
# qemu-user; cmocka for the tests: dpkg --add-architecture s390x,
# libcmocka-dev:s390x). The byte-order check of tests/portability.sh s390x.
#   cmake -S . -B build-s390x -DCMAKE_TOOLCHAIN_FILE=cmake/s390x-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR s390x)
set(CMAKE_C_COMPILER s390x-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER s390x-linux-gnu-g++)
set(FAVOR_S390X_SYSROOT /usr/s390x-linux-gnu)
find_program(FAVOR_QEMU_S390X qemu-s390x)
if(FAVOR_QEMU_S390X)
  # The target's loader run as the program, not qemu's -L: Debian 12's qemu-s390x
  # (7.2) with -L stops every dynamically linked s390x program, a bare printf
  # too, at "*** stack smashing detected ***"; started through ld64.so.1 they run.
  set(CMAKE_CROSSCOMPILING_EMULATOR ${FAVOR_QEMU_S390X} ${FAVOR_S390X_SYSROOT}/lib/ld64.so.1
      --library-path ${FAVOR_S390X_SYSROOT}/lib:/usr/lib/s390x-linux-gnu)
endif()
# Libraries and headers of the target: the cross sysroot and Debian's multiarch dirs.
set(CMAKE_FIND_ROOT_PATH ${FAVOR_S390X_SYSROOT} /usr/lib/s390x-linux-gnu)
set(CMAKE_LIBRARY_ARCHITECTURE s390x-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# pkg-config must look at the s390x .pc files only.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/s390x-linux-gnu/pkgconfig:/usr/share/pkgconfig)
