// fakegpu-stat --timeline: where, between two samples of a device, what it
// runs changed. A sampler that a loaded host keeps off the CPU for a few
// milliseconds would otherwise stamp each change with the time it woke, and
// a late sample reads as work that ran on under the wrong process or as a
// gap that was not there. The engine's busy counters place the changes
// exactly: a process the engine runs at both samples, or at one of them,
// ran without a pause up to the later sample (from the earlier one), since
// the engine never idles while a context has runnable work and switches
// only at slice ends and empty queues. Pure: the samples are arguments.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace fakegpu {

struct TimelineSample {
  std::uint64_t now_ns = 0;
  std::int32_t running = -1;        // process slot on the engine, -1 idle
  std::vector<std::uint64_t> busy;  // engine time per process slot so far
};

struct TimelineEdge {
  std::uint64_t at_ns = 0;
  std::int32_t running = -1;  // process slot from at_ns on, -1 idle
};

// The changes from `prev` to `cur` in time order: the process `prev` found
// running kept the engine for the time it gained (up to `cur`); processes
// that gained time while running at neither sample follow it in slot order
// (their order among themselves is not known); the process `cur` finds
// running ran for the time it gained, up to `cur`; the rest was idle.
// Where both samples find the same process, its time is not split: the
// others (if any) are placed first and it after them, and a gap of its own
// within one sample period is not seen.
inline std::vector<TimelineEdge> timeline_edges(const TimelineSample& prev,
                                                const TimelineSample& cur) {
  std::vector<TimelineEdge> out;
  const std::uint64_t end = std::max(cur.now_ns, prev.now_ns);
  auto gained = [&](std::int32_t p) -> std::uint64_t {
    if (p < 0) return 0;
    const auto i = static_cast<std::size_t>(p);
    const std::uint64_t before = i < prev.busy.size() ? prev.busy[i] : 0;
    const std::uint64_t after = i < cur.busy.size() ? cur.busy[i] : 0;
    return std::min(after > before ? after - before : 0, end - prev.now_ns);
  };
  std::int32_t state = prev.running;
  auto change = [&](std::uint64_t at, std::int32_t running) {
    if (running == state) return;
    out.push_back({at, running});
    state = running;
  };
  std::uint64_t t = prev.now_ns;
  const bool same = prev.running == cur.running;
  if (prev.running >= 0 && !same) t = std::min(end, t + gained(prev.running));
  for (std::size_t i = 0; i < cur.busy.size(); ++i) {
    const auto p = static_cast<std::int32_t>(i);
    if (p == prev.running || p == cur.running || gained(p) == 0) continue;
    change(t, p);
    t = std::min(end, t + gained(p));
  }
  if (same) {
    change(t, cur.running);
    return out;
  }
  if (cur.running < 0) {
    change(t, -1);
    return out;
  }
  const std::uint64_t start = std::max(t, end - gained(cur.running));
  if (start > t) change(t, -1);
  change(start, cur.running);
  return out;
}

}  // namespace fakegpu
