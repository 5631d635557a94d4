#include "tests/fakegpu/core/engine.hpp"

#include <algorithm>

#include "tests/fakegpu/core/shared_allocations.hpp"

namespace fakegpu {
namespace {

WorkItem& head_of(ContextSlot& c) {
  return c.items[c.head];
}

// Whether a context's next item can make progress now. Reaching a host
// callback is recorded here: the process's callback thread polls `reached`.
bool head_runnable(SharedState& s, ContextSlot& c) {
  if (c.state != SlotState::live || c.count == 0) return false;
  WorkItem& item = head_of(c);
  if (item.kind == ItemKind::wait_event) {
    const EventSlot& e = s.events[item.slot];
    return e.state == SlotState::free || e.completed >= item.ticket;
  }
  if (item.kind == ItemKind::host_fn) {
    EventSlot& e = s.events[item.slot];
    if (e.state != SlotState::live) return true;
    e.reached = std::max(e.reached, item.ticket);
    return e.host_done >= item.ticket;
  }
  return true;
}

// Next runnable context after `after` in the device's round-robin order.
int32_t next_runnable(SharedState& s, DeviceSlot& d, int32_t after, int32_t exclude) {
  if (d.ctx_count == 0) return -1;
  uint32_t start = 0;
  for (uint32_t i = 0; i < d.ctx_count; ++i) {
    if (d.ctx_list[i] == after) start = i + 1;
  }
  for (uint32_t k = 0; k < d.ctx_count; ++k) {
    int32_t c = d.ctx_list[(start + k) % d.ctx_count];
    if (c != exclude && head_runnable(s, s.contexts[c])) return c;
  }
  return -1;
}

void write_checkpoint(SharedState& s, uint32_t device) {
  DeviceSlot& d = s.devices[device];
  ++d.ck_index;
  uint32_t at = static_cast<uint32_t>(d.ck_index % kUtilRing);
  d.ck_busy[at] = d.busy_ns;
  for (ProcSlot& p : s.procs) {
    if (p.state == SlotState::live) p.ck_busy[device][at] = p.busy[device];
  }
}

// Record `ticket` of an event slot completed at `t`; a destroyed event
// whose last queued record this was goes.
void complete_record(EventSlot& e, uint64_t ticket, uint64_t t) {
  if (e.state == SlotState::free) return;
  if (ticket > e.completed) {
    e.completed = ticket;
    e.time_ns = t;
  }
  if (e.state == SlotState::dying && e.completed >= e.recorded) e.state = SlotState::free;
}

void complete_head(SharedState& s, ContextSlot& c, uint64_t t) {
  WorkItem& item = head_of(c);
  if ((item.kind == ItemKind::marker || item.kind == ItemKind::host_fn) && item.slot >= 0) {
    complete_record(s.events[item.slot], item.ticket, t);
  }
  c.completed_seq = item.seq;
  c.last_done_ns = t;
  c.head = (c.head + 1) % kQueueCap;
  --c.count;
}

}  // namespace

void advance_device(SharedState& s, uint32_t device, uint64_t now) {
  DeviceSlot& d = s.devices[device];
  const uint64_t slice = s.header.timeslice_ns;
  uint64_t t = d.clock_ns;
  while (t < now) {
    const uint64_t next_ck = s.header.created_ns + (d.ck_index + 1) * kUtilPeriodNs;
    if (d.running >= 0 && !head_runnable(s, s.contexts[d.running])) {
      d.last_ran = d.running;
      d.running = -1;
    }
    if (d.running < 0) {
      int32_t c = next_runnable(s, d, d.last_ran, -1);
      if (c < 0) {  // idle until the next checkpoint or now
        t = std::min(now, next_ck);
        if (t == next_ck) write_checkpoint(s, device);
        continue;
      }
      d.running = c;
      d.slice_start_ns = t;
    }
    ContextSlot& c = s.contexts[d.running];
    WorkItem& item = head_of(c);
    const bool others = next_runnable(s, d, d.running, d.running) >= 0;
    if (!others && d.slice_start_ns + slice <= t) d.slice_start_ns = t;  // alone: slices renew
    // A context that ran alone through a step longer than a slice is, when
    // another one arrives, in the slice that holds `t`: its switch is never
    // dated before `t` (the timeline ran backwards, completing the arrival's
    // work before it was submitted and charging that span twice).
    if (others && d.slice_start_ns + slice < t)
      d.slice_start_ns += (t - d.slice_start_ns) / slice * slice;
    const uint64_t slice_end = d.slice_start_ns + slice;
    uint64_t event = t + item.remaining_ns;
    if (others) event = std::min(event, slice_end);
    event = std::min({event, now, next_ck});
    const uint64_t step = event - t;
    if (step > 0) {
      item.remaining_ns -= step;
      c.busy_ns += step;
      d.busy_ns += step;
      s.procs[c.proc].busy[device] += step;
    }
    t = event;
    if (item.remaining_ns == 0) {
      complete_head(s, c, t);
      if (c.count == 0) {
        d.last_ran = d.running;
        d.running = -1;
      }
    } else if (others && t >= slice_end) {
      d.last_ran = d.running;  // preempted at the slice boundary; resumes later
      d.running = -1;
    }
    if (t == next_ck) write_checkpoint(s, device);
  }
  d.clock_ns = std::max(d.clock_ns, now);
}

void advance_all(SharedState& s, uint64_t now) {
  for (uint32_t i = 0; i < s.header.device_count; ++i) advance_device(s, i, now);
}

uint64_t enqueue(SharedState& s, int32_t ctx, ItemKind kind, uint64_t duration_ns, int32_t slot,
                 uint64_t ticket, uint32_t depth, uint64_t now) {
  ContextSlot& c = s.contexts[ctx];
  advance_device(s, c.device, now);
  if (c.count >= std::min(depth, kQueueCap)) return 0;
  WorkItem& item = c.items[(c.head + c.count) % kQueueCap];
  item.remaining_ns = (kind == ItemKind::kernel || kind == ItemKind::copy) ? duration_ns : 0;
  item.seq = ++c.submitted_seq;
  item.ticket = ticket;
  item.slot = slot;
  item.kind = kind;
  ++c.count;
  if (kind == ItemKind::marker && slot >= 0)
    s.events[slot].recorded = std::max(s.events[slot].recorded, ticket);
  // Zero-time items at the head of an idle context complete right away.
  advance_device(s, c.device, now);
  return item.seq;
}

uint64_t wait_hint_ns(const SharedState& s, int32_t ctx, uint64_t seq, uint64_t now) {
  const ContextSlot& c = s.contexts[ctx];
  const DeviceSlot& d = s.devices[c.device];
  uint64_t own = 0;
  bool blocked = false;
  for (uint32_t i = 0; i < c.count; ++i) {
    const WorkItem& item = c.items[(c.head + i) % kQueueCap];
    if (item.seq > seq) break;
    own += item.remaining_ns;
    blocked |= item.kind == ItemKind::wait_event || item.kind == ItemKind::host_fn;
  }
  uint64_t before = 0;
  if (d.running >= 0 && d.running != ctx) {
    const ContextSlot& r = s.contexts[d.running];
    uint64_t theirs = 0;
    for (uint32_t i = 0; i < r.count; ++i) theirs += r.items[(r.head + i) % kQueueCap].remaining_ns;
    const uint64_t slice_end = d.slice_start_ns + s.header.timeslice_ns;
    before = std::min(theirs, slice_end > now ? slice_end - now : 0);
  }
  uint64_t hint = own + before;
  if (blocked) hint = std::max<uint64_t>(hint, 100'000);
  return hint;
}

bool charge(SharedState& s, int32_t proc, uint32_t device, uint64_t bytes) {
  DeviceSlot& d = s.devices[device];
  if (bytes > d.total_mem || d.used_mem > d.total_mem - bytes) return false;
  d.used_mem += bytes;
  d.used_mem_peak = std::max(d.used_mem_peak, d.used_mem);
  s.procs[proc].mem[device] += bytes;
  return true;
}

void uncharge(SharedState& s, int32_t proc, uint32_t device, uint64_t bytes) {
  DeviceSlot& d = s.devices[device];
  ProcSlot& p = s.procs[proc];
  bytes = std::min(bytes, p.mem[device]);
  p.mem[device] -= bytes;
  d.used_mem -= std::min(bytes, d.used_mem);
}

int32_t create_context(SharedState& s, int32_t proc, uint32_t device, uint64_t overhead,
                       uint64_t now, bool* oom) {
  *oom = false;
  advance_device(s, device, now);
  for (int32_t i = 0; i < static_cast<int32_t>(kMaxContexts); ++i) {
    ContextSlot& c = s.contexts[i];
    if (c.state == SlotState::live) continue;
    if (!charge(s, proc, device, overhead)) {
      *oom = true;
      return -1;
    }
    const uint64_t generation = c.generation + 1;
    c.state = SlotState::live;
    c.device = device;
    c.proc = proc;
    c.flags = 0;
    c.generation = generation;
    c.overhead = overhead;
    c.submitted_seq = c.completed_seq = 0;
    c.last_done_ns = now;
    c.busy_ns = 0;
    c.head = c.count = 0;
    DeviceSlot& d = s.devices[device];
    d.ctx_list[d.ctx_count++] = i;
    return i;
  }
  return -1;
}

void destroy_context(SharedState& s, int32_t ctx, uint64_t now) {
  ContextSlot& c = s.contexts[ctx];
  if (c.state != SlotState::live) return;
  DeviceSlot& d = s.devices[c.device];
  advance_device(s, c.device, now);
  if (d.running == ctx) d.running = -1;
  if (d.last_ran == ctx) d.last_ran = -1;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < d.ctx_count; ++i) {
    if (d.ctx_list[i] != ctx) d.ctx_list[kept++] = d.ctx_list[i];
  }
  d.ctx_count = kept;
  uncharge(s, c.proc, c.device, c.overhead);
  // Its queued records never run: their events hold nothing more to wait
  // for (a waiter elsewhere is let go), and a destroyed one that waited only
  // for them goes with the context.
  for (uint32_t i = 0; i < c.count; ++i) {
    const WorkItem& item = c.items[(c.head + i) % kQueueCap];
    if (item.kind == ItemKind::marker && item.slot >= 0)
      complete_record(s.events[item.slot], item.ticket, now);
  }
  c.count = 0;
  c.state = SlotState::free;
}

void release_process(SharedState& s, int32_t proc, uint64_t now) {
  ProcSlot& p = s.procs[proc];
  if (p.state != SlotState::live) return;
  advance_all(s, now);
  for (int32_t i = 0; i < static_cast<int32_t>(kMaxContexts); ++i) {
    if (s.contexts[i].state == SlotState::live && s.contexts[i].proc == proc)
      destroy_context(s, i, now);
  }
  drop_all_shared(s, proc);  // first: what others still hold stays charged, to them
  for (uint32_t d = 0; d < kMaxDevices; ++d) uncharge(s, proc, d, p.mem[d]);
  for (EventSlot& e : s.events) {
    if (e.state != SlotState::free && e.proc == proc) e.state = SlotState::free;
  }
  p.state = SlotState::exited;
}

int32_t create_event(SharedState& s, int32_t proc, uint64_t* first_ticket) {
  for (int32_t i = 0; i < static_cast<int32_t>(kMaxEvents); ++i) {
    EventSlot& e = s.events[i];
    if (e.state != SlotState::free) continue;
    const uint64_t base = std::max({e.recorded, e.completed, e.host_done});
    e = EventSlot{};
    e.state = SlotState::live;
    e.proc = proc;
    e.recorded = e.completed = e.reached = e.host_done = base;
    *first_ticket = base;
    return i;
  }
  return -1;
}

void destroy_event(SharedState& s, int32_t slot) {
  if (slot < 0 || slot >= static_cast<int32_t>(kMaxEvents)) return;
  EventSlot& e = s.events[slot];
  if (e.state != SlotState::live) return;
  e.state = e.completed < e.recorded ? SlotState::dying : SlotState::free;
}

namespace {

// Busy counter value at time `at` reconstructed from checkpoints (linear
// between them is wrong for bursts, so `at` is rounded down to a checkpoint).
bool busy_window(const uint64_t* ring, uint64_t ck_index, uint64_t created, uint64_t current,
                 uint64_t since_ns, uint64_t now, uint64_t* busy, uint64_t* span) {
  const uint64_t oldest = ck_index >= kUtilRing - 1 ? ck_index - (kUtilRing - 1) : 0;
  uint64_t k = since_ns <= created ? 0 : (since_ns - created) / kUtilPeriodNs;
  bool complete = true;
  if (k < oldest) {
    k = oldest;
    complete = false;
  }
  k = std::min(k, ck_index);
  const uint64_t base = k == 0 ? 0 : ring[k % kUtilRing];
  const uint64_t at = created + k * kUtilPeriodNs;
  *busy = current - std::min(current, base);
  *span = now > at ? now - at : 0;
  return complete;
}

}  // namespace

bool device_busy_since(const SharedState& s, uint32_t device, uint64_t since_ns, uint64_t now,
                       uint64_t* busy, uint64_t* span) {
  const DeviceSlot& d = s.devices[device];
  return busy_window(d.ck_busy, d.ck_index, s.header.created_ns, d.busy_ns, since_ns, now, busy,
                     span);
}

namespace {

// The growth of a checkpoint ring's counter over period k (checkpoint k-1 to k).
bool ring_period_busy(const DeviceSlot& d, const uint64_t* ring, uint64_t k, uint64_t* busy) {
  const uint64_t oldest = d.ck_index >= kUtilRing - 1 ? d.ck_index - (kUtilRing - 1) : 0;
  if (k == 0 || k > d.ck_index || k - 1 < oldest) return false;
  const uint64_t from = k - 1 == 0 ? 0 : ring[(k - 1) % kUtilRing];
  const uint64_t to = ring[k % kUtilRing];
  *busy = to - std::min(to, from);
  return true;
}

}  // namespace

bool device_period_busy(const SharedState& s, uint32_t device, uint64_t k, uint64_t* busy) {
  const DeviceSlot& d = s.devices[device];
  return ring_period_busy(d, d.ck_busy, k, busy);
}

bool process_period_busy(const SharedState& s, int32_t proc, uint32_t device, uint64_t k,
                         uint64_t* busy) {
  // A slot is zeroed when its process registers: checkpoints from before
  // hold zero for it, as its counter did then.
  return ring_period_busy(s.devices[device], s.procs[proc].ck_busy[device], k, busy);
}

bool process_busy_since(const SharedState& s, int32_t proc, uint32_t device, uint64_t since_ns,
                        uint64_t now, uint64_t* busy, uint64_t* span) {
  const ProcSlot& p = s.procs[proc];
  const DeviceSlot& d = s.devices[device];
  // Checkpoints before the process registered hold zero for it.
  return busy_window(p.ck_busy[device], d.ck_index, s.header.created_ns, p.busy[device],
                     std::max(since_ns, p.registered_ns), now, busy, span);
}

}  // namespace fakegpu
