#include "shim/accounting/capture_tracker.hpp"

#include <atomic>
#include <cstdint>

namespace cushare::shim {
namespace {

constexpr unsigned kMaxCaptures = 256;
constinit std::atomic<std::uintptr_t> g_capturing[kMaxCaptures] = {};
constinit std::atomic<std::uint64_t> g_captured_bytes[kMaxCaptures] = {};
// A capture the table had no room for: treat every stream as capturing
// (safe: the gate then skips event injection) until it ends.
constinit std::atomic<unsigned> g_overflow{0};
constinit std::atomic<CaptureStatusQuery> g_query{nullptr};

// Any address unique to the thread, apart from every driver handle.
thread_local constinit char t_per_thread_stream_key = 0;

std::uintptr_t key_of(CUstream s) {
  // The handle of the per-thread default stream names the caller's own
  // stream: each thread's capture of it is a capture of its own.
  if (s == CU_STREAM_PER_THREAD) return reinterpret_cast<std::uintptr_t>(&t_per_thread_stream_key);
  // The legacy default stream cannot be captured; 0 marks free entries.
  return reinterpret_cast<std::uintptr_t>(s);
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

void set_capture_status_query(CaptureStatusQuery query) noexcept {
  g_query.store(query, std::memory_order_release);
}

void capture_began(CUstream stream) noexcept {
  const auto key = key_of(stream);
  if (!key) return;
  detail::g_captures_active.fetch_add(1, std::memory_order_acq_rel);
  for (auto& e : g_capturing) {
    std::uintptr_t expected = 0;
    if (e.compare_exchange_strong(expected, key, std::memory_order_acq_rel)) return;
  }
  g_overflow.fetch_add(1, std::memory_order_acq_rel);
}

void capture_add_alloc(CUstream stream, std::uint64_t bytes) noexcept {
  const auto key = key_of(stream);
  for (unsigned i = 0; key && i < kMaxCaptures; ++i) {
    if (g_capturing[i].load(std::memory_order_acquire) == key) {
      g_captured_bytes[i].fetch_add(bytes, std::memory_order_relaxed);
      return;
    }
  }
}

std::uint64_t capture_ended(CUstream stream) noexcept {
  const auto key = key_of(stream);
  if (!key) return 0;
  for (unsigned i = 0; i < kMaxCaptures; ++i) {
    std::uintptr_t expected = key;
    if (g_capturing[i].load(std::memory_order_acquire) != key) continue;
    const std::uint64_t bytes = g_captured_bytes[i].exchange(0, std::memory_order_acq_rel);
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
