// VMM allocations shared through POSIX file descriptors: what may be
// exported, what may be imported (bad descriptors are errors, never a crash),
// and that an import is the same memory, charged once.
#include <cuda.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "tests/integration/fakegpu/cu_expect.hpp"
#include "tests/integration/fakegpu/primary_fixture.hpp"

namespace {

constexpr size_t kGranule = 2 << 20;

CUmemAllocationProp device_prop(unsigned long long handle_types) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(handle_types);
  return prop;
}

void* as_os_handle(int fd) {
  return reinterpret_cast<void*>(static_cast<intptr_t>(fd));
}

class VmmShare : public fakegpu_test::LeavesNothingCharged {};

TEST_F(VmmShare, OnlyRequestedFileDescriptorsAreExported) {
  CUmemGenericAllocationHandle plain = 0, shareable = 0;
  auto none = device_prop(0), fd = device_prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  ASSERT_CU(CUDA_SUCCESS, cuMemCreate(&plain, kGranule, &none, 0));
  ASSERT_CU(CUDA_SUCCESS, cuMemCreate(&shareable, kGranule, &fd, 0));
  int out = -1;
  const auto kFd = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemExportToShareableHandle(&out, plain, kFd, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cuMemExportToShareableHandle(&out, shareable, CU_MEM_HANDLE_TYPE_WIN32, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemExportToShareableHandle(&out, shareable, kFd, 1));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemExportToShareableHandle(nullptr, shareable, kFd, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemExportToShareableHandle(&out, 0x1234, kFd, 0));
  EXPECT_EQ(out, -1);
  EXPECT_CU(CUDA_SUCCESS, cuMemRelease(plain));
  EXPECT_CU(CUDA_SUCCESS, cuMemRelease(shareable));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemExportToShareableHandle(&out, shareable, kFd, 0));

  // Win32 and fabric handles do not exist on Linux; host memory is not IPC capable.
  CUmemGenericAllocationHandle h = 0;
  auto win32 = device_prop(CU_MEM_HANDLE_TYPE_WIN32);
  EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, cuMemCreate(&h, kGranule, &win32, 0));
  auto host = device_prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  host.location.type = CU_MEM_LOCATION_TYPE_HOST;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, kGranule, &host, 0));
}

TEST_F(VmmShare, ForeignAndGarbageDescriptorsAreRefused) {
  CUmemGenericAllocationHandle h = 0;
  const auto kFd = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(null_fd, 0);
  for (int fd : {-1, null_fd, 1 << 20, INT32_MAX})
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemImportFromShareableHandle(&h, as_os_handle(fd), kFd))
        << "fd " << fd;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(uintptr_t{1} << 40), kFd));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cuMemImportFromShareableHandle(nullptr, as_os_handle(0), kFd));
  EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED,
            cuMemImportFromShareableHandle(&h, as_os_handle(null_fd), CU_MEM_HANDLE_TYPE_WIN32));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cuMemImportFromShareableHandle(&h, as_os_handle(null_fd),
                                           static_cast<CUmemAllocationHandleType>(0x40)));
  close(null_fd);
}

TEST_F(VmmShare, AnImportIsTheSameMemoryChargedOnce) {
  auto prop = device_prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CUmemGenericAllocationHandle created = 0, imported = 0;
  ASSERT_CU(CUDA_SUCCESS, cuMemCreate(&created, kGranule, &prop, 0));
  CUdeviceptr va = 0;
  ASSERT_CU(CUDA_SUCCESS, cuMemAddressReserve(&va, kGranule, 0, 0, 0));
  ASSERT_CU(CUDA_SUCCESS, cuMemMap(va, kGranule, 0, created, 0));
  const uint32_t word = 0xC0FFEE;
  ASSERT_CU(CUDA_SUCCESS, cuMemcpyHtoD(va, &word, sizeof word));  // written before the export
  int fd = -1;
  ASSERT_CU(CUDA_SUCCESS, cuMemExportToShareableHandle(
                              &fd, created, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  ASSERT_CU(CUDA_SUCCESS, cuMemImportFromShareableHandle(&imported, as_os_handle(fd),
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  close(fd);
  EXPECT_EQ(free_before_ - free_now(), kGranule);
  CUmemAllocationProp got{};
  EXPECT_CU(CUDA_SUCCESS, cuMemGetAllocationPropertiesFromHandle(&got, imported));
  EXPECT_EQ(got.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(got.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  // Released everywhere but mapped: the memory stays until the unmap.
  EXPECT_CU(CUDA_SUCCESS, cuMemRelease(created));
  EXPECT_CU(CUDA_SUCCESS, cuMemRelease(imported));
  EXPECT_EQ(free_before_ - free_now(), kGranule);
  uint32_t back = 0;
  EXPECT_CU(CUDA_SUCCESS, cuMemcpyDtoH(&back, va, sizeof back));
  EXPECT_EQ(back, word);
  EXPECT_CU(CUDA_SUCCESS, cuMemUnmap(va, kGranule));
  EXPECT_CU(CUDA_SUCCESS, cuMemAddressFree(va, kGranule));
}

}  // namespace
