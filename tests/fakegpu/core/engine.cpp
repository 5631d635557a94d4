#include "tests/fakegpu/core/engine.hpp"

#include <algorithm>
#include <limits>

#include "tests/fakegpu/core/shared_allocations.hpp"

namespace fakegpu {
namespace {

WorkItem& item_at(ContextSlot& c, uint32_t i) {
  return c.items[(c.head + i) % kQueueCap];
}
const WorkItem& item_at(const ContextSlot& c, uint32_t i) {
  return c.items[(c.head + i) % kQueueCap];
}

// Whether an item at the head of its stream can make progress now. Reaching
// a host callback is recorded here: the process's callback thread polls
// `reached`.
bool item_runnable(SharedState& s, WorkItem& item) {
  if (item.kind == ItemKind::wait_event) {
    const EventSlot& e = s.events[item.slot];
    return e.state == SlotState::free || record_completed(e, item.ticket);
  }
  if (item.kind == ItemKind::host_fn) {
    EventSlot& e = s.events[item.slot];
    if (e.state != SlotState::live) return true;
    e.reached = std::max(e.reached, item.ticket);
    return e.host_done >= item.ticket;
  }
  return true;
}

// What a context runs now: the heads of its streams that their stream order
// lets start (the legacy stream's after every earlier blocking stream's item,
// a blocking stream's after every earlier legacy one) and that can progress.
// One taking no time (a record, a wait satisfied) alone, completed at once;
// else the kernels and copies, oldest first, at most kConcurrentStreams, which
// share the engine equally. Stops once every stream's head was seen.
struct Running {
  uint32_t at[kConcurrentStreams];
  uint32_t count = 0;
  bool instant = false;
};

Running running_items(SharedState& s, ContextSlot& c) {
  Running r;
  if (c.state != SlotState::live) return r;
  bool earlier_blocking = false;
  bool earlier_legacy = false;
  uint32_t heads = 0;
  for (uint32_t i = 0; i < c.count && heads < c.lanes_pending; ++i) {
    WorkItem& item = item_at(c, i);
    if (item.lane_head) {
      ++heads;
      bool ordered = true;
      if (item.order == LaneOrder::legacy) ordered = !earlier_blocking;
      if (item.order == LaneOrder::blocking) ordered = !earlier_legacy;
      if (ordered && item_runnable(s, item)) {
        if (item.remaining_ns == 0) {
          r.at[0] = i;
          r.count = 1;
          r.instant = true;
          return r;
        }
        if (r.count < kConcurrentStreams) r.at[r.count++] = i;
      }
    }
    earlier_legacy |= item.order == LaneOrder::legacy;
    earlier_blocking |= item.order == LaneOrder::blocking;
  }
  return r;
}

bool context_runnable(SharedState& s, ContextSlot& c) {
  return running_items(s, c).count > 0;
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
    if (c != exclude && context_runnable(s, s.contexts[c])) return c;
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

bool records_pending(const EventSlot& e) {
  for (uint64_t p : e.pending)
    if (p != 0) return true;
  return false;
}

// Record `ticket` of an event slot is queued.
void queue_record(EventSlot& e, uint64_t ticket) {
  e.recorded = std::max(e.recorded, ticket);
  uint64_t* oldest = &e.pending[0];
  for (uint64_t& p : e.pending) {
    if (p == 0) {
      p = ticket;
      return;
    }
    if (p < *oldest) oldest = &p;
  }
  *oldest = ticket;
}

// Record `ticket` of an event slot completed at `t`; a destroyed event
// whose last queued record this was goes.
void complete_record(EventSlot& e, uint64_t ticket, uint64_t t) {
  if (e.state == SlotState::free) return;
  if (ticket > e.completed) {
    e.completed = ticket;
    e.time_ns = t;
  }
  for (uint64_t& p : e.pending)
    if (p == ticket) p = 0;
  if (e.state == SlotState::dying && !records_pending(e)) e.state = SlotState::free;
}

// Item `at` completed at `t`: the next of its stream becomes that stream's
// head, and it leaves the queue (the rest keep their order).
void complete_item(SharedState& s, ContextSlot& c, uint32_t at, uint64_t t) {
  const WorkItem done = item_at(c, at);
  if ((done.kind == ItemKind::marker || done.kind == ItemKind::host_fn) && done.slot >= 0) {
    complete_record(s.events[done.slot], done.ticket, t);
  }
  bool more = false;
  for (uint32_t i = at + 1; i < c.count && !more; ++i) {
    WorkItem& next = item_at(c, i);
    if (next.lane == done.lane) {
      next.lane_head = 1;
      more = true;
    }
  }
  if (!more && c.lanes_pending > 0) --c.lanes_pending;
  // The shorter side moves, as a deque's erase: the items before `at` one
  // place towards the tail and the head past the gap, or the items after it
  // one place towards the head. Either way those before keep their index
  // and those after lose one. Behind a long kernel at the head, each of
  // another stream's completions is then O(1), not a move of the whole
  // queue (which slowed a deep queue's completions on the host).
  if (at < c.count / 2) {
    for (uint32_t i = at; i > 0; --i) item_at(c, i) = item_at(c, i - 1);
    c.head = (c.head + 1) % kQueueCap;
  } else {
    for (uint32_t i = at; i + 1 < c.count; ++i) item_at(c, i) = item_at(c, i + 1);
  }
  --c.count;
  c.last_done_ns = t;
}

}  // namespace

void advance_device(SharedState& s, uint32_t device, uint64_t now) {
  DeviceSlot& d = s.devices[device];
  const uint64_t slice = s.header.timeslice_ns;
  uint64_t t = d.clock_ns;
  while (t < now) {
    const uint64_t next_ck = s.header.created_ns + (d.ck_index + 1) * kUtilPeriodNs;
    if (d.running >= 0 && !context_runnable(s, s.contexts[d.running])) {
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
    const Running run = running_items(s, c);
    if (run.instant) {
      complete_item(s, c, run.at[0], t);
      continue;
    }
    const bool others = next_runnable(s, d, d.running, d.running) >= 0;
    if (!others && d.slice_start_ns + slice <= t) d.slice_start_ns = t;  // alone: slices renew
    // A context that ran alone through a step longer than a slice is, when
    // another one arrives, in the slice that holds `t`: its switch is never
    // dated before `t` (the timeline ran backwards, completing the arrival's
    // work before it was submitted and charging that span twice).
    if (others && d.slice_start_ns + slice < t)
      d.slice_start_ns += (t - d.slice_start_ns) / slice * slice;
    const uint64_t slice_end = d.slice_start_ns + slice;
    // The running items share the engine equally: the shortest ends after
    // its remaining time once per item.
    uint64_t shortest = std::numeric_limits<uint64_t>::max();
    for (uint32_t k = 0; k < run.count; ++k)
      shortest = std::min(shortest, item_at(c, run.at[k]).remaining_ns);
    uint64_t event = t + shortest * run.count;
    if (others) event = std::min(event, slice_end);
    event = std::min({event, now, next_ck});
    const uint64_t step = event - t;
    if (step > 0) {
      // The nanoseconds the division leaves go to the oldest: every item
      // still gets at most `shortest`, and the busy time is exactly `step`.
      for (uint32_t k = 0; k < run.count; ++k) {
        WorkItem& item = item_at(c, run.at[k]);
        item.remaining_ns -= step / run.count + (k < step % run.count ? 1 : 0);
      }
      c.busy_ns += step;
      d.busy_ns += step;
      s.procs[c.proc].busy[device] += step;
    }
    t = event;
    // The newest first: completing one moves the items after it.
    for (uint32_t k = run.count; k-- > 0;)
      if (item_at(c, run.at[k]).remaining_ns == 0) complete_item(s, c, run.at[k], t);
    // Switched out once its queue is empty, or preempted at the slice
    // boundary (it resumes later).
    if (c.count == 0 || (others && t >= slice_end)) {
      d.last_ran = d.running;
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
                 uint64_t ticket, uint32_t depth, uint64_t now, Lane lane) {
  ContextSlot& c = s.contexts[ctx];
  advance_device(s, c.device, now);
  if (c.count >= std::min(depth, kQueueCap)) return 0;
  // From the newest back: a stream that keeps being used is found at once.
  bool queued = false;
  for (uint32_t i = c.count; i-- > 0 && !queued;) queued = item_at(c, i).lane == lane.id;
  WorkItem& item = item_at(c, c.count);
  item.remaining_ns = (kind == ItemKind::kernel || kind == ItemKind::copy) ? duration_ns : 0;
  item.seq = ++c.submitted_seq;
  item.ticket = ticket;
  item.lane = lane.id;
  item.slot = slot;
  item.kind = kind;
  item.order = lane.order;
  item.lane_head = queued ? 0 : 1;
  if (!queued) ++c.lanes_pending;
  ++c.count;
  if (kind == ItemKind::marker && slot >= 0) queue_record(s.events[slot], ticket);
  // Zero-time items at the head of an idle context complete right away.
  advance_device(s, c.device, now);
  return item.seq;
}

bool record_completed(const EventSlot& e, uint64_t ticket) {
  if (ticket > e.completed) return false;
  for (uint64_t p : e.pending)
    if (p == ticket) return false;
  return true;
}

bool context_done_through(const SharedState& s, int32_t ctx, uint64_t seq) {
  const ContextSlot& c = s.contexts[ctx];
  return c.count == 0 || item_at(c, 0).seq > seq;
}

bool lane_done_through(const SharedState& s, int32_t ctx, uint64_t lane, uint64_t seq) {
  const ContextSlot& c = s.contexts[ctx];
  for (uint32_t i = 0; i < c.count; ++i) {
    const WorkItem& item = item_at(c, i);
    if (item.seq > seq) return true;
    if (item.lane == lane) return false;
  }
  return true;
}

namespace {

// The work queued on `lane` of a context up to and including item `seq`.
uint64_t lane_work_through(const ContextSlot& c, uint64_t lane, uint64_t seq) {
  uint64_t work = 0;
  for (uint32_t i = 0; i < c.count; ++i) {
    const WorkItem& item = item_at(c, i);
    if (item.seq > seq) break;
    if (item.lane == lane) work += item.remaining_ns;
  }
  return work;
}

// A lower bound on how long a wait item stays blocked: its record's
// stream's work up to the record where that is in this context, nothing once
// the record completed, and otherwise (another context's record, a host
// callback) unknown.
bool wait_bound(const SharedState& s, const ContextSlot& c, const WorkItem& wait, uint64_t* ns) {
  const EventSlot& e = s.events[wait.slot];
  if (wait.kind == ItemKind::wait_event) {
    if (e.state == SlotState::free || record_completed(e, wait.ticket)) {
      *ns = 0;
      return true;
    }
    for (uint32_t i = 0; i < c.count; ++i) {
      const WorkItem& item = item_at(c, i);
      if (item.kind == ItemKind::marker && item.slot == wait.slot && item.ticket == wait.ticket) {
        *ns = lane_work_through(c, item.lane, item.seq);
        return true;
      }
    }
  }
  return false;
}

}  // namespace

uint64_t wait_hint_ns(const SharedState& s, int32_t ctx, uint64_t seq, uint64_t now,
                      const uint64_t* lane) {
  const ContextSlot& c = s.contexts[ctx];
  const DeviceSlot& d = s.devices[c.device];
  uint64_t own = 0;
  uint64_t waits = 0;  // the longest known bound of a wait on the way
  bool blocked = false;
  for (uint32_t i = 0; i < c.count; ++i) {
    const WorkItem& item = item_at(c, i);
    if (item.seq > seq) break;
    if (lane && item.lane != *lane) continue;
    own += item.remaining_ns;
    if (item.kind == ItemKind::wait_event || item.kind == ItemKind::host_fn) {
      uint64_t bound = 0;
      if (wait_bound(s, c, item, &bound)) {
        waits = std::max(waits, bound);
      } else {
        blocked = true;
      }
    }
  }
  uint64_t before = 0;
  if (d.running >= 0 && d.running != ctx) {
    const ContextSlot& r = s.contexts[d.running];
    uint64_t theirs = 0;
    for (uint32_t i = 0; i < r.count; ++i) theirs += item_at(r, i).remaining_ns;
    const uint64_t slice_end = d.slice_start_ns + s.header.timeslice_ns;
    before = std::min(theirs, slice_end > now ? slice_end - now : 0);
  }
  uint64_t hint = std::max(own, waits) + before;
  if (blocked) hint = std::max<uint64_t>(hint, 100'000);
  return hint;
}

uint64_t drain_hint_ns(const SharedState& s, int32_t ctx, uint64_t now, const uint64_t* lane) {
  const ContextSlot& c = s.contexts[ctx];
  if (c.count == 0) return 0;
  const WorkItem& middle = item_at(c, c.count / 2);
  uint64_t hint = wait_hint_ns(s, ctx, middle.seq, now, &middle.lane);
  for (uint32_t i = c.count; lane && i-- > 0;) {
    const WorkItem& newest = item_at(c, i);
    if (newest.lane != *lane) continue;
    hint = std::min(hint, wait_hint_ns(s, ctx, newest.seq, now, lane));
    break;
  }
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
    c.submitted_seq = 0;
    c.last_done_ns = now;
    c.busy_ns = 0;
    c.head = c.count = c.lanes_pending = 0;
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
  c.count = c.lanes_pending = 0;
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
  e.state = records_pending(e) ? SlotState::dying : SlotState::free;
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
