#include "tests/fakegpu/core/state_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>

#include "tests/fakegpu/core/engine.hpp"
#include "tests/fakegpu/core/pid_view.hpp"

namespace fakegpu {

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void sleep_until_ns(uint64_t deadline) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(deadline / 1'000'000'000ull);
  ts.tv_nsec = static_cast<long>(deadline % 1'000'000'000ull);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

uint64_t process_start_ticks(int pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return 0;
  // Fields after the command name (which may hold spaces) start after the last ')'.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  rest >> field;  // field 3: state
  if (field == "Z" || field == "X" || field == "x") return 0;
  for (int i = 4; i <= 22; ++i) rest >> field;  // field 22: starttime
  return std::strtoull(field.c_str(), nullptr, 10);
}

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void init_mutex(pthread_mutex_t* m) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(m, &attr);
  pthread_mutexattr_destroy(&attr);
}

}  // namespace

void init_state_contents(SharedState& s, const Config& config, uint64_t node_id, uint64_t now) {
  StateHeader& h = s.header;
  h.version = kStateVersion;
  h.device_count = static_cast<uint32_t>(config.devices.size());
  h.total_size = sizeof(SharedState);
  h.node_id = node_id;
  h.created_ns = now;
  h.created_realtime_ns = realtime_ns();
  h.context_overhead = config.context_overhead;
  h.timeslice_ns = config.timeslice_ns;
  h.last_reap_ns = now;
  h.xid_seq = 0;
  for (uint32_t i = 0; i < h.device_count; ++i) {
    DeviceSlot& d = s.devices[i];
    const DeviceSpec& spec = config.devices[i];
    std::snprintf(d.name, sizeof d.name, "%s", spec.name.c_str());
    const uint64_t hi = splitmix(node_id ^ (0x100 + i)), lo = splitmix(hi ^ node_id);
    std::memcpy(d.uuid_bytes, &hi, 8);
    std::memcpy(d.uuid_bytes + 8, &lo, 8);
    const uint8_t* b = d.uuid_bytes;
    std::snprintf(d.uuid, sizeof d.uuid,
                  "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                  b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                  b[14], b[15]);
    d.total_mem = spec.memory;
    d.sms = spec.sms;
    d.cc_major = spec.cc_major;
    d.cc_minor = spec.cc_minor;
    d.running = d.last_ran = -1;
    d.clock_ns = now;
  }
}

StateFile* StateFile::open(const Config& config, std::string& error) {
  const std::string& path = config.state_path;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    error =
        "fakegpu: cannot open state file '" + path + "' (FAKEGPU_STATE): " + std::strerror(errno);
    return nullptr;
  }
  flock(fd, LOCK_EX);  // serialises creation against concurrent first users
  struct stat st {};
  fstat(fd, &st);
  const bool fresh = st.st_size == 0;
  if (fresh && ftruncate(fd, sizeof(SharedState)) != 0) {
    error = "fakegpu: cannot size state file '" + path + "': " + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  if (!fresh && static_cast<uint64_t>(st.st_size) != sizeof(SharedState)) {
    error = "fakegpu: '" + path + "' is not a fakegpu state file of this version (size " +
            std::to_string(st.st_size) + ", expected " + std::to_string(sizeof(SharedState)) +
            "); delete it or run fakegpu-stat --reset";
    close(fd);
    return nullptr;
  }
  void* map = mmap(nullptr, sizeof(SharedState), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    error = "fakegpu: cannot map state file '" + path + "': " + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  auto* s = static_cast<SharedState*>(map);
  // Creation runs entirely under the flock, so a zero magic seen under it
  // means a creator died half-way: initialise again.
  if (fresh || __atomic_load_n(&s->header.magic, __ATOMIC_ACQUIRE) == 0) {
    init_mutex(&s->header.mutex);
    init_state_contents(*s, config, std::random_device{}() * 0x100000001ull ^ monotonic_ns(),
                        monotonic_ns());
    __atomic_store_n(&s->header.magic, kStateMagic, __ATOMIC_RELEASE);
  } else if (__atomic_load_n(&s->header.magic, __ATOMIC_ACQUIRE) != kStateMagic ||
             s->header.version != kStateVersion) {
    error =
        "fakegpu: '" + path + "' has a bad magic or version; delete it or run fakegpu-stat --reset";
    munmap(map, sizeof(SharedState));
    close(fd);
    return nullptr;
  }
  flock(fd, LOCK_UN);
  close(fd);
  return new StateFile(path, s);
}

void StateFile::repair_after_owner_death() {
  // The dead holder may have stopped between any two stores. Everything
  // derived is recomputed; queues are clamped into range.
  SharedState& s = *state_;
  for (uint32_t d = 0; d < s.header.device_count; ++d) {
    DeviceSlot& dev = s.devices[d];
    uint64_t used = 0;
    for (const ProcSlot& p : s.procs) {
      if (p.state == SlotState::live) used += p.mem[d];
    }
    dev.used_mem = used;
    dev.used_mem_peak = std::max(dev.used_mem_peak, used);
    uint32_t n = 0;
    for (int32_t c = 0; c < static_cast<int32_t>(kMaxContexts); ++c) {
      if (s.contexts[c].state == SlotState::live && s.contexts[c].device == d)
        dev.ctx_list[n++] = c;
    }
    dev.ctx_count = n;
    if (dev.running >= static_cast<int32_t>(kMaxContexts) || dev.running < -1) dev.running = -1;
    if (dev.running >= 0 && s.contexts[dev.running].state != SlotState::live) dev.running = -1;
  }
  for (ContextSlot& c : s.contexts) {
    c.head %= kQueueCap;
    if (c.count > kQueueCap) c.count = kQueueCap;
    // Each stream's first queued item is its head (a completion may have
    // been cut short between moving the mark and removing the item).
    c.lanes_pending = 0;
    for (uint32_t i = 0; i < c.count; ++i) {
      WorkItem& item = c.items[(c.head + i) % kQueueCap];
      bool first = true;
      for (uint32_t j = 0; j < i && first; ++j)
        first = c.items[(c.head + j) % kQueueCap].lane != item.lane;
      item.lane_head = first ? 1 : 0;
      c.lanes_pending += item.lane_head;
    }
  }
}

uint64_t StateFile::lock(bool reap) {
  int rc = pthread_mutex_lock(&state_->header.mutex);
  if (rc == EOWNERDEAD) {
    repair_after_owner_death();
    pthread_mutex_consistent(&state_->header.mutex);
    reap = true;
  } else if (rc != 0) {
    std::fprintf(stderr,
                 "fakegpu: state mutex in '%s' is unusable (%s); run fakegpu-stat --reset\n",
                 path_.c_str(), std::strerror(rc));
    std::abort();
  }
  const uint64_t now = monotonic_ns();
  advance_all(*state_, now);
  if (reap || now - state_->header.last_reap_ns > 100'000'000ull) reap_dead(now);
  return now;
}

void StateFile::unlock() {
  pthread_mutex_unlock(&state_->header.mutex);
}

void StateFile::reap_dead(uint64_t now) {
  SharedState& s = *state_;
  s.header.last_reap_ns = now;
  for (int32_t i = 0; i < static_cast<int32_t>(kMaxProcs); ++i) {
    ProcSlot& p = s.procs[i];
    if (p.state != SlotState::live) continue;
    // Only what this process can see is judged; a container's processes are
    // judged from the node once an observer there has seen them.
    if (process_gone(p).value_or(false)) release_process(s, i, now);
  }
}

void StateFile::reset(const Config& config) {
  uint64_t now = lock();
  SharedState& s = *state_;
  const uint64_t node_id = s.header.node_id;
  std::memset(static_cast<void*>(&s.devices), 0,
              sizeof(SharedState) - offsetof(SharedState, devices));
  for (ContextSlot& c : s.contexts) c.generation = 1'000'000;  // stale handles never match again
  init_state_contents(s, config, node_id, now);
  unlock();
}

}  // namespace fakegpu
