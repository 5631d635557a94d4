// vmm_share_probe: one side of a VMM allocation shared between two processes
// through a POSIX file descriptor (linked with -lcuda, run with the shim
// preloaded). Prints JSON lines; the test reads the ground truth between them.
//   export  cuMemCreate --bytes (shareable as a file descriptor), map it,
//           write a pattern, export it, print {"ready"}; send the descriptor
//           over the unix socket --socket to the importer, wait until it has
//           written its own pattern, read that back, unmap, release, print
//           the results and exit
//   import  receive the descriptor, import, map, set access, read the
//           exporter's pattern, write another, print {"mapped"}; after a
//           line on stdin tell the exporter; after another read the pattern
//           again (the memory outlives the exporter's release), launch
//           kLaunches kernels (the gate counts them in this allocation),
//           unmap, release, print, exit
#include <cuda.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "probe_driver.hpp"
#include "samples/spin_kernel_ptx.hpp"

namespace {

using json = nlohmann::json;
using probe::expect;
using probe::fail;

constexpr auto kFd = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
constexpr std::size_t kPattern = 1 << 20;  // bytes of the pattern copied each way
constexpr int kLaunches = 8;

// Launches kLaunches spin kernels and waits for them.
void launch_kernels() {
  CUmodule module = nullptr;
  expect(cuModuleLoadData(&module, samples::kSpinKernelPtx), "cuModuleLoadData");
  CUfunction spin = nullptr;
  expect(cuModuleGetFunction(&spin, module, "spin"), "cuModuleGetFunction");
  for (int i = 0; i < kLaunches; ++i) {
    std::uint64_t ns = 100'000;
    void* params[] = {&ns};
    expect(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel");
  }
  expect(cuCtxSynchronize(), "cuCtxSynchronize");
  expect(cuModuleUnload(module), "cuModuleUnload");
}

sockaddr_un address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) fail("socket path too long");
  std::memcpy(a.sun_path, path.c_str(), path.size());
  return a;
}

void send_fd(int sock, int fd) {
  char byte = 'f';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  if (sendmsg(sock, &msg, 0) != 1) fail("sendmsg");
}

int receive_fd(int sock) {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (recvmsg(sock, &msg, 0) != 1) fail("recvmsg");
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (!c || c->cmsg_type != SCM_RIGHTS) fail("no descriptor received");
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

void wait_byte(int sock) {
  char byte = 0;
  if (read(sock, &byte, 1) != 1) fail("peer went away");
}

// Reserves an address range and maps all of `handle` there, read-write.
CUdeviceptr map_all(CUmemGenericAllocationHandle handle, std::size_t bytes, CUdevice dev) {
  CUdeviceptr va = 0;
  expect(cuMemAddressReserve(&va, bytes, 0, 0, 0), "cuMemAddressReserve");
  expect(cuMemMap(va, bytes, 0, handle, 0), "cuMemMap");
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  expect(cuMemSetAccess(va, bytes, &access, 1), "cuMemSetAccess");
  return va;
}

void unmap_all(CUdeviceptr va, std::size_t bytes) {
  expect(cuMemUnmap(va, bytes), "cuMemUnmap");
  expect(cuMemAddressFree(va, bytes), "cuMemAddressFree");
}

void write_pattern(CUdeviceptr va, std::uint8_t seed) {
  std::vector<std::uint8_t> host(kPattern);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::uint8_t>(seed + i * 7);
  expect(cuMemcpyHtoD(va, host.data(), host.size()), "cuMemcpyHtoD");
}

bool has_pattern(CUdeviceptr va, std::uint8_t seed) {
  std::vector<std::uint8_t> host(kPattern);
  expect(cuMemcpyDtoH(host.data(), va, host.size()), "cuMemcpyDtoH");
  for (std::size_t i = 0; i < host.size(); ++i)
    if (host[i] != static_cast<std::uint8_t>(seed + i * 7)) return false;
  return true;
}

void say(const json& j) {
  std::cout << j.dump() << std::endl;
}

int exporter(const std::string& path, std::size_t bytes) {
  const CUdevice dev = probe::start();
  const std::uint64_t free_before = probe::free_view();
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = kFd;
  CUmemGenericAllocationHandle handle = 0;
  expect(cuMemCreate(&handle, bytes, &prop, 0), "cuMemCreate");
  const CUdeviceptr va = map_all(handle, bytes, dev);
  write_pattern(va, 1);
  int fd = -1;
  expect(cuMemExportToShareableHandle(&fd, handle, kFd, 0), "cuMemExportToShareableHandle");
  const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_un a = address(path);
  if (bind(listener, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || listen(listener, 1))
    fail("bind " + path);
  say({{"ready", true}, {"free_before", free_before}, {"free_created", probe::free_view()}});
  const int sock = accept(listener, nullptr, nullptr);
  if (sock < 0) fail("accept");
  send_fd(sock, fd);
  close(fd);  // the importer holds its own copy now
  wait_byte(sock);
  const bool importer_wrote = has_pattern(va, 2);
  unmap_all(va, bytes);
  expect(cuMemRelease(handle), "cuMemRelease");
  say({{"importer_wrote", importer_wrote}, {"free_released", probe::free_view()}});
  return 0;
}

int importer(const std::string& path, std::size_t bytes) {
  const CUdevice dev = probe::start();
  const std::uint64_t free_before = probe::free_view();
  const int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_un a = address(path);
  if (connect(sock, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) fail("connect " + path);
  const int fd = receive_fd(sock);
  CUmemGenericAllocationHandle handle = 0;
  expect(cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(std::intptr_t{fd}), kFd),
         "cuMemImportFromShareableHandle");
  close(fd);
  const CUdeviceptr va = map_all(handle, bytes, dev);
  const bool exporter_wrote = has_pattern(va, 1);
  write_pattern(va, 2);
  say({{"mapped", true},
       {"exporter_wrote", exporter_wrote},
       {"free_before", free_before},
       {"free_mapped", probe::free_view()}});
  // The exporter lets go once told, so the test reads the device with both
  // processes' contexts first, then without the exporter's.
  std::string line;
  std::getline(std::cin, line);
  if (write(sock, "w", 1) != 1) fail("write to the exporter");
  std::getline(std::cin, line);  // the test has looked at the ground truth
  const bool still_there = has_pattern(va, 2);
  launch_kernels();
  unmap_all(va, bytes);
  expect(cuMemRelease(handle), "cuMemRelease");
  say({{"still_there", still_there},
       {"launches", kLaunches},
       {"free_released", probe::free_view()}});
  return 0;
}

}  // namespace

// An exception (a bad argument CLI11 lets through, a JSON error) fails the
// probe with its message, like any other failure, not with an abort.
int main(int argc, char** argv) try {
  CLI::App app{"vmm_share_probe"};
  std::string role, socket_path;
  std::size_t bytes = 512u << 20;
  app.add_option("role", role, "export or import")
      ->required()
      ->check(CLI::IsMember({"export", "import"}));
  app.add_option("--socket", socket_path, "unix socket the descriptor travels over")->required();
  app.add_option("--bytes", bytes, "size of the allocation");
  CLI11_PARSE(app, argc, argv);
  return role == "export" ? exporter(socket_path, bytes) : importer(socket_path, bytes);
} catch (const std::exception& e) {
  fail(e.what());
}
