# 32-bit x86 on an x86-64 Debian host: gcc -m32 with Debian's multilib and
# multiarch i386 libraries (gcc-multilib, libcmocka-dev:i386). Not a cross build:
# the tests run natively. Used by tests/portability.sh m32.
set(CMAKE_C_FLAGS_INIT "-m32")
set(CMAKE_CXX_FLAGS_INIT "-m32")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-m32")
set(CMAKE_LIBRARY_ARCHITECTURE i386-linux-gnu)
set(FIND_LIBRARY_USE_LIB64_PATHS OFF)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/i386-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(CMAKE_LIBRARY_PATH /usr/lib32)
