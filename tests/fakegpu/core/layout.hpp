#pragma once
// The node-wide state file every fakegpu process maps (FAKEGPU_STATE). Plain
// POD at fixed offsets, guarded by one robust process-shared mutex: a client
// killed while holding it leaves EOWNERDEAD, and the next locker repairs the
// derived fields (see state_file.cpp) before going on.
#include <pthread.h>

#include <cstdint>

namespace fakegpu {

inline constexpr uint64_t kStateMagic = 0x3155504745'4b4146ull;  // "FAKEGPU1"
inline constexpr uint32_t kStateVersion = 8;
inline constexpr uint32_t kMaxDevices = 8;
inline constexpr uint32_t kMaxProcs = 512;
inline constexpr uint32_t kMaxContexts = 256;
inline constexpr uint32_t kQueueCap = 1024;  // hard upper bound of FAKEGPU_QUEUE_DEPTH
// Streams of one context whose kernels run side by side (the driver's
// default CUDA_DEVICE_MAX_CONNECTIONS hardware queues).
inline constexpr uint32_t kConcurrentStreams = 8;
inline constexpr uint32_t kMaxEvents = 16384;
inline constexpr uint32_t kUtilRing = 64;  // checkpoints kept (x period = history)
inline constexpr uint64_t kUtilPeriodNs = 100'000'000;
inline constexpr uint32_t kXidRing = 64;
inline constexpr uint32_t kMaxSharedAllocations = 128;
inline constexpr uint32_t kMaxSharedHolders = 16;

enum class ItemKind : uint32_t {
  kernel = 1,      // occupies the engine for remaining_ns
  copy = 2,        // copy or memset: occupies the engine like a kernel
  marker = 3,      // event record: completes when reached
  wait_event = 4,  // blocks its stream until event `slot` completes `ticket`
  host_fn = 5,     // blocks its stream until the host callback for `slot` returns
};

// How a stream's work is ordered against the context's other streams: the
// legacy default stream waits for all earlier work of the blocking streams,
// and they wait for its earlier work; a non-blocking stream for neither.
enum class LaneOrder : uint32_t { blocking = 0, legacy = 1, non_blocking = 2 };

struct WorkItem {
  uint64_t remaining_ns;
  uint64_t seq;     // context submission sequence number (1-based, increasing)
  uint64_t ticket;  // event record number (marker, wait_event, host_fn)
  uint64_t lane;    // the stream it was queued on (its id in the process)
  int32_t slot;     // event slot or -1
  ItemKind kind;
  LaneOrder order;
  uint32_t lane_head;  // 1: the first of its stream's items still queued
};

// `dying`: an event destroyed while a record of it was still queued; the
// driver releases it once that completes (or its context goes).
enum class SlotState : uint32_t { free = 0, live = 1, exited = 2, dying = 3 };

struct ContextSlot {
  SlotState state;
  uint32_t device;
  int32_t proc;
  uint32_t flags;
  uint64_t generation;  // bumps on every reuse; handles carry it
  uint64_t overhead;
  uint64_t submitted_seq;
  uint64_t last_done_ns;  // simulated time the last item completed
  uint64_t busy_ns;
  // The queued items, oldest first (items complete out of order across
  // streams: a completed one leaves, the rest keep their order).
  uint32_t head;
  uint32_t count;
  uint32_t lanes_pending;  // streams with items queued (items with lane_head set)
  WorkItem items[kQueueCap];
};

struct DeviceSlot {
  char name[64];
  char uuid[48];  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  uint8_t uuid_bytes[16];
  uint64_t total_mem;
  uint64_t used_mem;  // sum of live processes' mem[] (contexts + allocations)
  // The highest used_mem ever reached (since creation or --reset-peak): the
  // exact maximum a sampler of used_mem can only approach.
  uint64_t used_mem_peak;
  uint32_t sms;
  int32_t cc_major;
  int32_t cc_minor;
  int32_t running;   // context slot on the engine, -1 idle
  int32_t last_ran;  // round-robin cursor
  uint32_t ctx_count;
  int32_t ctx_list[kMaxContexts];  // live contexts on this device
  uint64_t slice_start_ns;
  uint64_t clock_ns;  // the timeline is simulated up to here
  uint64_t busy_ns;   // since the state file was created
  uint64_t ck_index;  // checkpoint k is at created_ns + k * kUtilPeriodNs
  uint64_t ck_busy[kUtilRing];
};

struct ProcSlot {
  int32_t pid;  // in its own PID namespace
  SlotState state;
  uint64_t start_ticks;  // /proc/<pid>/stat field 22: pid + start time names a process
  uint64_t pidns;        // inode of its PID namespace (pid_view.hpp)
  uint64_t view_pidns;   // a namespace it was seen from, and its PID there (0: none yet)
  int32_t view_pid;
  uint32_t reserved;
  uint64_t registered_ns;
  uint64_t mem[kMaxDevices];   // context overhead + allocations
  uint64_t busy[kMaxDevices];  // engine time of its contexts
  uint64_t ck_busy[kMaxDevices][kUtilRing];
};

// Records of one event queued at once that are kept apart: streams complete
// them out of order, and a wait on an earlier record must not be let go by a
// later one's completion.
inline constexpr uint32_t kEventPendingRecords = 64;

struct EventSlot {
  SlotState state;
  int32_t proc;
  uint64_t recorded;   // highest record (ticket) queued; tickets go on across reuses
  uint64_t completed;  // highest record completed
  uint64_t time_ns;    // simulated completion time of `completed`
  // Records queued and not completed (0: none in that place). More than
  // kEventPendingRecords at once: the oldest is no longer kept, and counts
  // as completed once a later record did (never a wait that cannot end).
  uint64_t pending[kEventPendingRecords];
  uint64_t reached;    // host_fn: highest ticket whose item reached the head
  uint64_t host_done;  // host_fn: highest ticket whose callback returned
};

struct XidRecord {
  uint64_t seq;
  uint32_t device;
  uint32_t code;
  uint64_t time_ns;
};

// A VMM allocation exported to a file descriptor (cuMemExportToShareableHandle).
// Every process holding a handle or mapping of it is a holder; the physical
// memory stays charged to one holder (its mem[]) until the last one lets go.
struct SharedAllocation {
  SlotState state;
  uint32_t device;
  uint64_t bytes;
  uint64_t file_dev;  // the memfd behind every exported fd (fstat st_dev, st_ino)
  uint64_t file_ino;
  uint64_t handle_types;  // CUmemAllocationProp::requestedHandleTypes at cuMemCreate
  int32_t charged_proc;
  uint32_t holder_count;
  int32_t holders[kMaxSharedHolders];
};

struct StateHeader {
  uint64_t magic;  // written last at creation
  uint32_t version;
  uint32_t device_count;
  uint64_t total_size;
  pthread_mutex_t mutex;
  uint64_t node_id;
  uint64_t created_ns;  // CLOCK_MONOTONIC
  uint64_t created_realtime_ns;
  uint64_t context_overhead;
  uint64_t timeslice_ns;
  uint64_t last_reap_ns;
  uint64_t xid_seq;
  XidRecord xids[kXidRing];
};

struct SharedState {
  StateHeader header;
  DeviceSlot devices[kMaxDevices];
  ProcSlot procs[kMaxProcs];
  EventSlot events[kMaxEvents];
  ContextSlot contexts[kMaxContexts];
  SharedAllocation shared[kMaxSharedAllocations];
};

}  // namespace fakegpu
