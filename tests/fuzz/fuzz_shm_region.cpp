// libFuzzer target: region validation and mapping. The input becomes a region
// file (a real file in a private temporary folder: region files are never
// opened through a symbolic link, /proc/self/fd/N included) that is opened as
// a limits and as a usage region; a file that passes validation is then read the way
// the shim and the daemon read it. Nothing may crash, fault or hang, and
// validation must agree with the pure validator.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "shm/limits_seqlock.hpp"
#include "shm/process_slots.hpp"
#include "shm/region_file.hpp"
#include "shm/region_validate.hpp"

using namespace cushare::shm;

namespace {

// Input layout: byte 0 picks the file size (exact region size, the input's
// own length, or a few odd sizes); the rest is the file's leading content.
std::uint64_t pick_size(std::uint8_t selector, std::size_t content, RegionKind kind) {
  switch (selector % 5) {
    case 0:
      return region_size(kind);
    case 1:
      return content;
    case 2:
      return region_size(kind) + 1 + selector;
    case 3:
      return sizeof(RegionHeader) + selector;
    default:
      return region_size(kind) - 1 - selector;
  }
}

template <class Mapping>
void try_open(const std::string& path, RegionKind kind, const std::uint8_t* content,
              std::size_t len, std::uint64_t file_size) {
  // The header as the file holds it: content, then the zeros of ftruncate.
  std::uint8_t raw[sizeof(RegionHeader)] = {};
  std::memcpy(raw, content, std::min(len, sizeof raw));
  HeaderFields h;
  if (file_size >= sizeof(RegionHeader)) {
    std::memcpy(&h.magic, raw, 8);
    std::memcpy(&h.layout_version, raw + 8, 4);
    std::memcpy(&h.header_size, raw + 12, 4);
    std::memcpy(&h.total_size, raw + 16, 8);
  }
  const bool pure_ok = !validate_region_header(kind, h, file_size).has_value();
  try {
    auto m = Mapping::open(path, Access::kReadOnly);
    if (!pure_ok) std::abort();  // mapping accepted what validation rejects
    if constexpr (std::is_same_v<Mapping, LimitsMapping>) {
      const auto& r = m.region();
      (void)find_gpu_entry(r, "GPU-0");
      const unsigned n = std::min(r.gpu_count.load(), kMaxGpus);
      for (unsigned g = 0; g < n; ++g) (void)read_gpu_limits(r, g);
    } else {
      const auto& r = m.region();
      for (unsigned i = 0; i < 8; ++i) (void)slot_state(r.slots[i]);
    }
  } catch (const RegionError& e) {
    if (pure_ok) std::abort();  // validation passed but opening failed
    if (std::strchr(e.what(), '\n') != nullptr) std::abort();
  }
}

// One file, rewritten for every input, in a folder made once per process.
const std::string& region_path() {
  static const std::string path = [] {
    std::string dir = (std::filesystem::temp_directory_path() / "cushare-fuzz-XXXXXX").string();
    if (!mkdtemp(dir.data())) std::abort();
    return dir + "/region";
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t selector = data[0];
  const std::uint8_t* content = data + 1;
  const std::size_t len = size - 1;
  for (RegionKind kind : {RegionKind::kLimits, RegionKind::kUsage}) {
    const std::string& path = region_path();
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return 0;
    const std::uint64_t file_size = pick_size(selector, len, kind);
    if (ftruncate(fd, static_cast<off_t>(file_size)) != 0 ||
        pwrite(fd, content, std::min<std::uint64_t>(len, file_size), 0) < 0) {
      close(fd);
      return 0;
    }
    const std::size_t head = static_cast<std::size_t>(std::min<std::uint64_t>(len, file_size));
    if (kind == RegionKind::kLimits) {
      try_open<LimitsMapping>(path, kind, content, head, file_size);
    } else {
      try_open<UsageMapping>(path, kind, content, head, file_size);
    }
    close(fd);
  }
  return 0;
}
