#include "region_fixture.hpp"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace cushare::tools::testing {

namespace {
void init_header(shm::RegionHeader& h, std::uint64_t magic, std::uint64_t size,
                 const std::string& id, std::uint64_t created, std::uint32_t flags) {
  h.layout_version = shm::kLayoutVersion;
  h.header_size = sizeof(shm::RegionHeader);
  h.total_size = size;
  h.created_unix_ns = created;
  std::strncpy(h.alloc_id, id.c_str(), shm::kAllocIdBytes - 1);
  h.creator_pid = 1;
  h.flags = flags;
  h.magic.store(magic);
}

template <typename T>
void write_bytes(const T& value, const std::filesystem::path& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&value), sizeof(T));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}
}  // namespace

RegionPair make_regions(const std::string& id, std::uint64_t created_unix_ns, std::uint32_t flags) {
  RegionPair r{std::make_unique<shm::LimitsRegion>(), std::make_unique<shm::UsageRegion>()};
  std::memset(static_cast<void*>(r.limits.get()), 0, sizeof(shm::LimitsRegion));
  std::memset(static_cast<void*>(r.usage.get()), 0, sizeof(shm::UsageRegion));
  init_header(r.limits->header, shm::kLimitsMagic, sizeof(shm::LimitsRegion), id, created_unix_ns,
              flags);
  init_header(r.usage->header, shm::kUsageMagic, sizeof(shm::UsageRegion), id, created_unix_ns,
              flags);
  return r;
}

void set_gpu(RegionPair& r, std::uint32_t i, const std::string& uuid, std::uint64_t memory_limit,
             std::uint32_t compute_pct, std::uint32_t weight, shm::ComputeMode mode) {
  shm::GpuLimits& g = r.limits->gpus[i];
  std::strncpy(g.uuid, uuid.c_str(), shm::kUuidBytes - 1);
  g.memory_limit_bytes = memory_limit;
  g.compute_limit_pct = compute_pct;
  g.weight = weight;
  g.mode = static_cast<std::uint32_t>(mode);
  if (r.limits->gpu_count <= i) r.limits->gpu_count = i + 1;
  if (r.usage->gpu_count <= i) r.usage->gpu_count = i + 1;
}

void add_process(RegionPair& r, std::uint32_t s, std::uint32_t pid, std::uint32_t host_pid,
                 std::uint32_t gpu, std::uint64_t bytes, std::uint64_t overhead,
                 std::uint64_t heartbeat_ns) {
  shm::ProcessSlot& slot = r.usage->slots[s];
  slot.state = static_cast<std::uint32_t>(shm::SlotState::kActive);
  slot.pid = pid;
  slot.host_pid = host_pid;
  // A tenant container's PID namespace, never the reader's: cusharectl
  // returns the charges of gone processes only in its own namespace.
  slot.pidns_inode = 4026599001ull;
  slot.heartbeat_ns = heartbeat_ns;
  slot.bytes[gpu] = bytes;
  slot.overhead[gpu] = overhead;
  r.usage->gpus[gpu].used_bytes += bytes + overhead;
}

void write_regions(const RegionPair& r, const std::filesystem::path& folder, bool with_usage) {
  std::filesystem::create_directories(folder);
  write_bytes(*r.limits, folder / "limits");
  if (with_usage) write_bytes(*r.usage, folder / "usage");
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "cushare-ctl-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace cushare::tools::testing
