#pragma once
// The simulated device engines. Pure logic on SharedState with an explicit
// `now` (CLOCK_MONOTONIC ns): no syscalls, no clock reads, so it is unit-tested
// with a fake clock. Callers hold the state mutex.
//
// Model: one engine per device. Each stream of a context (a lane) runs its
// items in submission order; the streams are independent but for the legacy
// default stream's barrier (LaneOrder) and the events they wait on. The
// kernels at the heads of a context's streams run side by side, sharing the
// engine equally (the busy time is the sum of their durations, as if each
// filled the device), so a short kernel beside a long one on another stream
// ends first, and an event recorded on an idle stream completes at once.
// Contexts with runnable work share the engine round-robin in timeslices; a
// context is switched out at a slice boundary (even mid-kernel: the kernel is
// preempted and resumes later) only if another context is waiting, and as
// soon as its queue is empty or blocked. A lone context runs back to back.
// Simulation is lazy: advance() replays the timeline from clock_ns to now.
#include <cstdint>

#include "tests/fakegpu/core/layout.hpp"

namespace fakegpu {

// Simulates every device up to `now`.
void advance_all(SharedState& s, uint64_t now);
void advance_device(SharedState& s, uint32_t device, uint64_t now);

// The stream an item is queued on.
struct Lane {
  uint64_t id = 0;
  LaneOrder order = LaneOrder::blocking;
};

// Appends an item to a context's queue on `lane` (after advancing its device
// to now). Returns the item's sequence number, or 0 if the context's queue
// holds `depth` items.
uint64_t enqueue(SharedState& s, int32_t ctx, ItemKind kind, uint64_t duration_ns, int32_t slot,
                 uint64_t ticket, uint32_t depth, uint64_t now, Lane lane = {});

// Whether every item of the context up to sequence number `seq` completed.
bool context_done_through(const SharedState& s, int32_t ctx, uint64_t seq);
// Whether every item of stream `lane` up to `seq` completed.
bool lane_done_through(const SharedState& s, int32_t ctx, uint64_t lane, uint64_t seq);

// Lower bound on the time from `now` until context `ctx` has completed item
// `seq` (of every stream, or of `*lane` alone), assuming nothing else
// arrives. Used to sleep instead of spinning.
uint64_t wait_hint_ns(const SharedState& s, int32_t ctx, uint64_t seq, uint64_t now,
                      const uint64_t* lane = nullptr);

// When a launch blocked on a full queue looks again: once the queue's middle
// item can have ended (its own stream's work through it), or the launching
// stream (`*lane`, where it has work queued) can have run dry, whichever is
// sooner. The context's other streams run beside those, so all of the work
// ahead of the item (a long kernel at the head on another stream, say) would
// be a bound too late: the launch would sleep while its own stream ran dry.
uint64_t drain_hint_ns(const SharedState& s, int32_t ctx, uint64_t now,
                       const uint64_t* lane = nullptr);

// Memory: charges `bytes` on `device` to process `proc`; false if the device
// lacks the capacity (nothing is charged then).
bool charge(SharedState& s, int32_t proc, uint32_t device, uint64_t bytes);
void uncharge(SharedState& s, int32_t proc, uint32_t device, uint64_t bytes);

// Creates a context (charging its overhead). Returns the slot or -1 with
// *oom set when memory, or not when the table, is exhausted.
int32_t create_context(SharedState& s, int32_t proc, uint32_t device, uint64_t overhead,
                       uint64_t now, bool* oom);
// Destroys a context: its queued work is dropped, its overhead returned.
void destroy_context(SharedState& s, int32_t ctx, uint64_t now);
// Frees everything a process held, as the driver does when a process dies.
void release_process(SharedState& s, int32_t proc, uint64_t now);

// Whether record `ticket` of an event slot completed (a wait on it is let go).
bool record_completed(const EventSlot& e, uint64_t ticket);

// Event slots. A new slot's tickets start after *first_ticket (the slot's
// earlier owners' last), so a record queued for one of them never completes
// the new one's.
int32_t create_event(SharedState& s, int32_t proc, uint64_t* first_ticket);
// A slot with a record still queued lives on (dying) until that completes.
void destroy_event(SharedState& s, int32_t slot);

// Busy time of a device (or one process on it) between checkpoint history and now.
// Returns false if `since_ns` predates the kept history; *busy and *span then
// cover the oldest kept checkpoint..now.
bool device_busy_since(const SharedState& s, uint32_t device, uint64_t since_ns, uint64_t now,
                       uint64_t* busy, uint64_t* span);
// GPU time process `proc` had on `device` in checkpoint period k (from
// checkpoint k-1 to checkpoint k, k >= 1); false where the ring no longer
// holds both ends or checkpoint k is not written yet.
bool process_period_busy(const SharedState& s, int32_t proc, uint32_t device, uint64_t k,
                         uint64_t* busy);
// The same for the whole device.
bool device_period_busy(const SharedState& s, uint32_t device, uint64_t k, uint64_t* busy);
bool process_busy_since(const SharedState& s, int32_t proc, uint32_t device, uint64_t since_ns,
                        uint64_t now, uint64_t* busy, uint64_t* span);

}  // namespace fakegpu
