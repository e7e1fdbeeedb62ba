# Cross-compiling for arm64 with Debian's gcc-aarch64-linux-gnu and arm64
# development packages installed through multiarch (libelf-dev:arm64, ...).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Arch-independent headers (CLI11, nlohmann-json, spdlog, fmt) live in
# /usr/include and their CMake files beside the host's libraries.
set(CMAKE_FIND_ROOT_PATH /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
