# Cross-compiles deltafin for arm64 Linux on a Debian x86-64 machine, with the cross compiler
# (g++-aarch64-linux-gnu) and Debian's multiarch :arm64 -dev packages (scripts/arm64-check.sh
# installs both). Programs built with it run under qemu-user.
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Multiarch: arm64 libraries and their CMake packages live in /usr/lib/aarch64-linux-gnu, which
# CMake searches (instead of /usr/lib/x86_64-linux-gnu) given the library architecture; headers
# are shared in /usr/include. The cross libc is in /usr/aarch64-linux-gnu.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)

# Runs arm64 programs (Catch2's test discovery, ctest, the tests' deltafin runs) on this machine,
# with libc6:arm64's loader and libc. Not -L /usr/aarch64-linux-gnu: that loader (the cross
# libc, another glibc build) with libc6:arm64's libc.so.6 hangs in pthread_create.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
