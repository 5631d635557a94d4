# All dependencies come from Debian packages installed by scripts/setup.
find_package(Threads REQUIRED)
find_package(Boost 1.74 REQUIRED)                  # Boost.Interprocess (header-only)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)                 # gRPC::grpc++
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
find_package(CLI11 CONFIG REQUIRED)                # CLI11::CLI11

if(NOT EXISTS ${CUDA_HOME}/include/cuda.h)
  message(FATAL_ERROR "cuda.h not found under ${CUDA_HOME}/include: set -DCUDA_HOME to a CUDA toolkit (headers only are used)")
endif()
# The hook table and the generated cuGetProcAddress table follow the CUDA 13
# Driver API: older headers would silently drop entry points a CUDA 13 runtime
# resolves. Every build (tests, the node image) uses 13.x headers.
file(STRINGS ${CUDA_HOME}/include/cuda.h _cuda_version_line REGEX "^#define CUDA_VERSION [0-9]+")
string(REGEX MATCH "[0-9]+" CUSHARE_CUDA_VERSION "${_cuda_version_line}")
if(NOT CUSHARE_CUDA_VERSION OR CUSHARE_CUDA_VERSION LESS 13000)
  message(FATAL_ERROR "CUDA headers in ${CUDA_HOME}/include are version '${CUSHARE_CUDA_VERSION}': "
                      "cushare needs the CUDA 13 headers (13000 or later)")
endif()
# Headers only: nothing links libcudart or the real libcuda at build time.
add_library(cuda_headers INTERFACE)
target_include_directories(cuda_headers SYSTEM INTERFACE ${CUDA_HOME}/include)

find_program(CLANGXX clang++)
