// Who launches on the per-thread default stream (gate/tracker.hpp). Its
// handle (CU_STREAM_PER_THREAD, and stream 0 of the _ptsz calls) names the
// calling thread's own stream, so an event a recorder puts there covers only
// the recorder's own launches. Where several threads launched on theirs, a
// batch's event goes on the legacy stream, which waits for them all: a
// barrier across the process's blocking streams, and the thread's later work
// then waits for a long kernel on any of them. Where one thread alone has
// launched there, its own records go on its own stream instead (the poller,
// another thread, still records on the legacy stream).
//
// Sticky: once a second thread launched on its per-thread stream, the
// legacy stream serves for the rest of the process (a thread's id is never
// reused, so a thread that ended and another that began are two). Pure: no
// driver calls, unit-tested (per_thread_stream_test).
#pragma once

#include <atomic>
#include <cstdint>

namespace cushare::shim::gate {

namespace detail {
// constinit: no dynamic initialisation, so no TLS wrapper call on the fast path.
extern __attribute__((
    tls_model("initial-exec"))) constinit thread_local std::uint64_t t_launching_thread_id;
std::uint64_t assign_launching_thread_id() noexcept;
}  // namespace detail

// A number of the calling thread's, never 0, never given to another thread
// of the process.
[[gnu::always_inline]] inline std::uint64_t launching_thread_id() noexcept {
  const std::uint64_t id = detail::t_launching_thread_id;
  return id != 0 ? id : detail::assign_launching_thread_id();
}

class PerThreadStreamLaunchers {
 public:
  // Before the launch on the per-thread stream of thread `thread` is
  // counted: the count's read-modify-write then publishes this to a
  // recorder that finds the launch counted (it reads the count first).
  void on_launch(std::uint64_t thread) noexcept {
    std::uint64_t first = first_.load(std::memory_order_relaxed);
    if (first == thread) [[likely]]
      return;
    if (first == 0 && first_.compare_exchange_strong(first, thread, std::memory_order_relaxed))
      return;
    // Checked first: the threads of a shared stream launch here all the time.
    if (first != thread && !shared_.load(std::memory_order_relaxed))
      shared_.store(true, std::memory_order_relaxed);
  }

  // Whether every launch on the per-thread stream so far was `thread`'s.
  bool only(std::uint64_t thread) const noexcept {
    return !shared_.load(std::memory_order_relaxed) &&
           first_.load(std::memory_order_relaxed) == thread;
  }

  void clear() noexcept {
    first_.store(0, std::memory_order_relaxed);
    shared_.store(false, std::memory_order_relaxed);
  }

 private:
  std::atomic<std::uint64_t> first_{0};  // the first thread to launch there (0: none yet)
  std::atomic<bool> shared_{false};      // another one has since
};

}  // namespace cushare::shim::gate
