// Which streams are being captured into a graph (cuStreamBeginCapture* ..
// cuStreamEndCapture hooks), so that the launch gate and the accounting never
// gate, count, record events on, synchronise, or charge work queued into a
// capture. Lock-free: a fixed set of atomic words; the common case (no
// capture in progress anywhere in the process) is one relaxed load.
//
// While a capture is under way the driver is asked about each stream
// (set_capture_status_query): a stream also joins a capture by waiting on an
// event recorded in a capturing stream, which no hook sees begin.
#pragma once

#include <atomic>
#include <cstdint>

#include "shim/driver/cuda_api.hpp"

namespace cushare::shim {

namespace detail {
// Captures under way in the process (inline below: the launch gate's fast
// path reads it on every launch).
extern constinit std::atomic<unsigned> g_captures_active;
bool stream_is_capturing_now(CUstream stream) noexcept;
}  // namespace detail

// Whether any capture may be under way in the process.
[[gnu::always_inline]] inline bool captures_active() noexcept {
  return detail::g_captures_active.load(std::memory_order_acquire) != 0;
}

[[gnu::always_inline]] inline bool stream_is_capturing(CUstream stream) noexcept {
  if (detail::g_captures_active.load(std::memory_order_acquire) == 0) [[likely]]
    return false;
  return detail::stream_is_capturing_now(stream);
}

// The driver's cuStreamIsCapturing; without one, only the streams whose
// capture began through the hooks count as capturing. And its
// cuStreamGetCaptureInfo_v2, which names the capture a stream is in (a
// stream that joined one by waiting on a captured event has no hook of its
// own).
using CaptureStatusQuery = CUresult (*)(CUstream, CUstreamCaptureStatus*);
using CaptureInfoQuery = PFN_cuStreamGetCaptureInfo_v11030;
void set_capture_status_query(CaptureStatusQuery query, CaptureInfoQuery info = nullptr) noexcept;

void capture_began(CUstream stream) noexcept;
// Ends the capture; returns the bytes of stream-ordered allocations captured
// on it, by its own stream or any stream that joined it (they become graph
// memory of the captured graph).
std::uint64_t capture_ended(CUstream stream) noexcept;
// A cuMemAlloc(FromPool)Async of `bytes` was captured on `stream`: counted
// to the capture `stream` began, or else to the one it joined. False when
// no capture the tracker knows holds it (its bytes are then charged only by
// the settling after a launch).
bool capture_add_alloc(CUstream stream, std::uint64_t bytes) noexcept;

}  // namespace cushare::shim
