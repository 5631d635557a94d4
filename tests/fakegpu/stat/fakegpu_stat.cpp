// fakegpu-stat: ground truth of the simulated node (honours FAKEGPU_STATE).
//   fakegpu-stat [--json]                    devices, memory, busy time per process
//   fakegpu-stat --inject-xid <device> <code> deliver an XID event to NVML event sets
//   fakegpu-stat --reset                      clear processes, memory and counters
//   fakegpu-stat --reset-peak                 restart each device's memory high-water mark
//   fakegpu-stat --timeline S [--period-us N] which process device 0 runs, sampled for S seconds
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>

#include "tests/fakegpu/core/config.hpp"
#include "tests/fakegpu/core/engine.hpp"
#include "tests/fakegpu/core/pid_view.hpp"
#include "tests/fakegpu/core/state_file.hpp"
#include "tests/fakegpu/stat/timeline_edges.hpp"

using namespace fakegpu;

namespace {

nlohmann::json snapshot(StateFile& file) {
  see_foreign(file);           // PIDs of container processes in this view
  StateLock lock(file, true);  // reap dead processes first, as the driver would have freed them
  const SharedState& s = lock.state();
  nlohmann::json devices = nlohmann::json::array();
  for (uint32_t d = 0; d < s.header.device_count; ++d) {
    const DeviceSlot& dev = s.devices[d];
    nlohmann::json processes = nlohmann::json::array();
    for (int32_t p = 0; p < static_cast<int32_t>(kMaxProcs); ++p) {
      const ProcSlot& proc = s.procs[p];
      if (proc.state == SlotState::free) continue;
      bool has_context = false;
      for (const ContextSlot& c : s.contexts) {
        has_context |= c.state == SlotState::live && c.proc == p && c.device == d;
      }
      if (!has_context && proc.busy[d] == 0 && proc.mem[d] == 0) continue;
      // A process this view cannot see is shown by its PID in its own
      // namespace, with that namespace.
      const auto pid = visible_pid(proc);
      nlohmann::json row{
          {"pid", pid.value_or(proc.pid)}, {"busy_ns", proc.busy[d]}, {"memory_used", proc.mem[d]}};
      if (!pid) row["pidns"] = proc.pidns;
      processes.push_back(std::move(row));
    }
    devices.push_back({{"index", d},
                       {"uuid", dev.uuid},
                       {"name", dev.name},
                       {"memory_total", dev.total_mem},
                       {"memory_used", dev.used_mem},
                       {"memory_used_peak", dev.used_mem_peak},
                       {"busy_ns", dev.busy_ns},
                       {"processes", processes}});
  }
  // time_ns: CLOCK_MONOTONIC of this snapshot, so two snapshots give an exact window.
  return {{"devices", devices}, {"time_ns", lock.now()}};
}

void print_text(const nlohmann::json& j) {
  for (const auto& dev : j["devices"]) {
    std::printf("device %d  %s  %s\n  memory %llu / %llu bytes used, busy %.3f s\n",
                dev["index"].get<int>(), dev["name"].get<std::string>().c_str(),
                dev["uuid"].get<std::string>().c_str(),
                dev["memory_used"].get<unsigned long long>(),
                dev["memory_total"].get<unsigned long long>(),
                static_cast<double>(dev["busy_ns"].get<uint64_t>()) / 1e9);
    for (const auto& p : dev["processes"]) {
      std::printf("  pid %-8d busy %10.3f s  memory %llu bytes\n", p["pid"].get<int>(),
                  static_cast<double>(p["busy_ns"].get<uint64_t>()) / 1e9,
                  p["memory_used"].get<unsigned long long>());
    }
  }
}

// Samples device 0 every `period_ns` for `seconds` and prints a line each
// time what it runs changes: CLOCK_MONOTONIC ns and the running process's PID
// (-1: idle). For finding where a schedule leaves the device idle (compare
// with cushared's lease log). The changes are dated by the engine's busy
// counters, not by when the sample was taken (timeline_edges.hpp), so a
// sampler a loaded host keeps waiting still places them right; sampling
// takes the state lock, so keep the period well above a launch's cost.
void timeline(StateFile& file, double seconds, uint64_t period_ns) {
  uint64_t end = 0;
  TimelineSample prev;
  std::vector<int32_t> pids(kMaxProcs, -1);
  for (bool first = true;; first = false) {
    TimelineSample cur;
    cur.busy.resize(kMaxProcs);
    {
      StateLock lock(file);
      SharedState& s = lock.state();
      cur.now_ns = lock.now();
      if (end == 0) end = cur.now_ns + static_cast<uint64_t>(seconds * 1e9);
      advance_device(s, 0, cur.now_ns);
      const int32_t c = s.devices[0].running;
      if (c >= 0) cur.running = s.contexts[c].proc;
      // Only the processes with a context on the device (a few), not every
      // slot (megabytes under the lock every launch takes). One that exited
      // between two samples is not shown.
      const DeviceSlot& dev = s.devices[0];
      for (uint32_t i = 0; i < dev.ctx_count && i < kMaxContexts; ++i) {
        const int32_t ctx = dev.ctx_list[i];
        if (ctx < 0 || ctx >= static_cast<int32_t>(kMaxContexts)) continue;
        const int32_t p = s.contexts[ctx].proc;
        if (p < 0 || p >= static_cast<int32_t>(kMaxProcs)) continue;
        cur.busy[static_cast<size_t>(p)] = s.procs[p].busy[0];
        pids[static_cast<size_t>(p)] = s.procs[p].pid;
      }
    }
    auto pid_of = [&](int32_t slot) { return slot < 0 ? -1 : pids[static_cast<size_t>(slot)]; };
    if (first) {
      std::printf("%llu %d\n", static_cast<unsigned long long>(cur.now_ns), pid_of(cur.running));
    } else {
      for (const TimelineEdge& e : timeline_edges(prev, cur))
        std::printf("%llu %d\n", static_cast<unsigned long long>(e.at_ns), pid_of(e.running));
    }
    prev = std::move(cur);
    if (prev.now_ns >= end) break;
    sleep_until_ns(prev.now_ns + period_ns);
  }
}

}  // namespace

// An exception (a state file it cannot read, a JSON error) ends the program
// with a message and exit status 1, not an abort.
int main(int argc, char** argv) try {
  bool json = false, reset = false, reset_peak = false;
  std::vector<unsigned> xid;
  CLI::App app{"fakegpu ground truth: devices, memory and GPU time per process (FAKEGPU_STATE)"};
  app.add_flag("--json", json, "print {\"devices\":[...]} as JSON");
  app.add_flag("--reset", reset,
               "clear processes, contexts, memory and counters in the state file");
  app.add_flag("--reset-peak", reset_peak,
               "restart each device's memory high-water mark (memory_used_peak) from now");
  app.add_option("--inject-xid", xid, "deliver an XID event: <device> <code>")->expected(2);
  double timeline_s = 0;
  uint64_t period_us = 100;
  app.add_option("--timeline", timeline_s,
                 "print which process device 0 runs whenever it changes, for this many seconds");
  app.add_option("--period-us", period_us, "--timeline's sampling period")
      ->check(CLI::Range(1, 1000000));
  CLI11_PARSE(app, argc, argv);

  ConfigResult loaded = load_config();
  if (!loaded.config) {
    std::fprintf(stderr, "%s\n", loaded.error.c_str());
    return 2;
  }
  std::string error;
  StateFile* file = StateFile::open(*loaded.config, error);
  if (file == nullptr) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  if (reset) {
    file->reset(*loaded.config);
    return 0;
  }
  if (reset_peak) {
    StateLock lock(*file, true);
    SharedState& s = lock.state();
    for (uint32_t d = 0; d < s.header.device_count; ++d)
      s.devices[d].used_mem_peak = s.devices[d].used_mem;
    return 0;
  }
  if (!xid.empty()) {
    StateLock lock(*file);
    SharedState& s = lock.state();
    if (xid[0] >= s.header.device_count) {
      std::fprintf(stderr, "fakegpu-stat: no device %u (the state file has %u)\n", xid[0],
                   s.header.device_count);
      return 2;
    }
    const uint64_t seq = ++s.header.xid_seq;
    XidRecord& r = s.header.xids[seq % kXidRing];
    r.device = xid[0];
    r.code = xid[1];
    r.time_ns = lock.now();
    __atomic_store_n(&r.seq, seq, __ATOMIC_RELEASE);
    return 0;
  }
  if (timeline_s > 0) {
    timeline(*file, timeline_s, period_us * 1000);
    return 0;
  }
  const nlohmann::json j = snapshot(*file);
  if (json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    print_text(j);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fakegpu-stat: %s\n", e.what());
  return 1;
}
