#include "shim/accounting/capture_tracker.hpp"

#include <atomic>
#include <cstdint>

namespace cushare::shim {
namespace {

constexpr unsigned kMaxCaptures = 256;
constinit std::atomic<std::uintptr_t> g_capturing[kMaxCaptures] = {};
constinit std::atomic<std::uint64_t> g_captured_bytes[kMaxCaptures] = {};
// The driver's id of each entry's capture (0: not known), unique in the
// process for its lifetime: a joined stream's allocations find their entry
// by it.
constinit std::atomic<std::uint64_t> g_capture_ids[kMaxCaptures] = {};
// A capture the table had no room for: treat every stream as capturing
// (safe: the gate then skips event injection) until it ends.
constinit std::atomic<unsigned> g_overflow{0};
constinit std::atomic<CaptureStatusQuery> g_query{nullptr};
constinit std::atomic<CaptureInfoQuery> g_info{nullptr};

// Any address unique to the thread, apart from every driver handle.
thread_local constinit char t_per_thread_stream_key = 0;

std::uintptr_t key_of(CUstream s) {
  // The handle of the per-thread default stream names the caller's own
  // stream: each thread's capture of it is a capture of its own.
  if (s == CU_STREAM_PER_THREAD) return reinterpret_cast<std::uintptr_t>(&t_per_thread_stream_key);
  // The legacy default stream cannot be captured; 0 marks free entries.
  return reinterpret_cast<std::uintptr_t>(s);
}

// The id of the capture `s` is in; 0 when it is in none or the driver cannot
// tell.
std::uint64_t capture_id_of(CUstream s) {
  const CaptureInfoQuery info = g_info.load(std::memory_order_acquire);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  if (!info || info(s, &status, &id, nullptr, nullptr, nullptr) != CUDA_SUCCESS ||
      status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
    return 0;
  return id;
}

}  // namespace

constinit std::atomic<unsigned> detail::g_captures_active{0};

bool detail::stream_is_capturing_now(CUstream stream) noexcept {
  if (const CaptureStatusQuery query = g_query.load(std::memory_order_acquire)) {
    // An error (the legacy stream while another stream captures, an
    // implicit-capture error) counts as capturing: the work submitted there
    // fails or joins the capture, and must not be counted as queued.
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return query(stream, &status) != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
  }
  if (g_overflow.load(std::memory_order_relaxed)) return true;
  const auto key = key_of(stream);
  for (const auto& e : g_capturing)
    if (e.load(std::memory_order_relaxed) == key) return true;
  return false;
}

void set_capture_status_query(CaptureStatusQuery query, CaptureInfoQuery info) noexcept {
  g_query.store(query, std::memory_order_release);
  g_info.store(info, std::memory_order_release);
}

void capture_began(CUstream stream) noexcept {
  const auto key = key_of(stream);
  if (!key) return;
  detail::g_captures_active.fetch_add(1, std::memory_order_acq_rel);
  const std::uint64_t id = capture_id_of(stream);
  for (unsigned i = 0; i < kMaxCaptures; ++i) {
    std::uintptr_t expected = 0;
    if (g_capturing[i].compare_exchange_strong(expected, key, std::memory_order_acq_rel)) {
      // Bytes a late allocation of the entry's last capture left are not this one's.
      g_captured_bytes[i].store(0, std::memory_order_relaxed);
      g_capture_ids[i].store(id, std::memory_order_release);
      return;
    }
  }
  g_overflow.fetch_add(1, std::memory_order_acq_rel);
}

bool capture_add_alloc(CUstream stream, std::uint64_t bytes) noexcept {
  // The capture the driver says the stream is in, whether it began there or
  // the stream joined it (waited on an event recorded in it); by the stream
  // only where the driver cannot tell (an entry of a stream destroyed while it
  // captured may have its handle, reused).
  const std::uint64_t id = capture_id_of(stream);
  for (unsigned i = 0; id && i < kMaxCaptures; ++i) {
    if (g_capture_ids[i].load(std::memory_order_acquire) == id &&
        g_capturing[i].load(std::memory_order_acquire) != 0) {
      g_captured_bytes[i].fetch_add(bytes, std::memory_order_relaxed);
      return true;
    }
  }
  const auto key = key_of(stream);
  for (unsigned i = 0; !id && key && i < kMaxCaptures; ++i) {
    if (g_capturing[i].load(std::memory_order_acquire) == key) {
      g_captured_bytes[i].fetch_add(bytes, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

std::uint64_t capture_ended(CUstream stream) noexcept {
  const auto key = key_of(stream);
  if (!key) return 0;
  for (unsigned i = 0; i < kMaxCaptures; ++i) {
    std::uintptr_t expected = key;
    if (g_capturing[i].load(std::memory_order_acquire) != key) continue;
    const std::uint64_t bytes = g_captured_bytes[i].exchange(0, std::memory_order_acq_rel);
    g_capture_ids[i].store(0, std::memory_order_release);
    if (g_capturing[i].compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) {
      detail::g_captures_active.fetch_sub(1, std::memory_order_acq_rel);
      return bytes;
    }
  }
  // Began while the table was full (or was never seen: ignore).
  unsigned o = g_overflow.load(std::memory_order_relaxed);
  while (o && !g_overflow.compare_exchange_weak(o, o - 1, std::memory_order_acq_rel)) {
  }
  if (o) detail::g_captures_active.fetch_sub(1, std::memory_order_acq_rel);
  return 0;
}

}  // namespace cushare::shim
