# All dependencies come from Debian packages installed by scripts/setup.
find_package(Threads REQUIRED)
find_package(Boost 1.74 REQUIRED)                  # Boost.Interprocess (header-only)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBUNWIND REQUIRED IMPORTED_TARGET libunwind)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)                 # gRPC::grpc++
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
find_package(CLI11 CONFIG REQUIRED)                # CLI11::CLI11
find_path(HTTPLIB_INCLUDE_DIR httplib.h REQUIRED)

if(NOT EXISTS ${CUDA_HOME}/include/cuda.h)
  message(FATAL_ERROR "cuda.h not found under ${CUDA_HOME}/include: set -DCUDA_HOME to a CUDA toolkit (headers only are used)")
endif()
# Headers only: nothing links libcudart or the real libcuda at build time.
add_library(cuda_headers INTERFACE)
target_include_directories(cuda_headers SYSTEM INTERFACE ${CUDA_HOME}/include)

find_program(CLANGXX clang++)
