// The streams a batch of launches went to (gate/tracker.hpp). A batch's
// event on the stream of its last launch alone would complete before the
// work the batch queued on the process's other streams, which a GPU runs
// alongside: so the streams a batch went to are kept here, and the record
// covers each of them (docs/scheduler.md, "Several streams in one batch").
//
// The stream of the latest launch is the tail. A launch to another stream
// makes it the tail and then files it in a small lock-free set; a launch
// that keeps to the tail's stream, the common case, costs one load and a
// compare. A record takes the set and the tail, and files the tail again
// for the next batch (launches that keep to it file nothing). A launcher
// only ever files its own stream, and the recorder and forget() run under
// the tracker's lock: a stream the application destroys is never filed
// again once forgotten. Pure: no driver calls, unit-tested
// (batch_streams_test).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/driver/cuda_api.hpp"

namespace cushare::shim::gate {

class BatchStreams {
 public:
  // Streams a batch may go to before the set is full. On overflow the ones
  // not filed are reported (Taken::overflowed), not kept.
  static constexpr std::size_t kCapacity = 8;
  // No stream: not a handle the driver gives out (0 is the legacy stream,
  // 1 and 2 CU_STREAM_LEGACY and CU_STREAM_PER_THREAD).
  static CUstream none() noexcept { return reinterpret_cast<CUstream>(~std::uintptr_t{0}); }

  BatchStreams() noexcept { clear(); }

  // Fast path, before the launch is counted: it went to `stream`.
  [[gnu::always_inline]] void on_launch(CUstream stream) noexcept {
    // Sequentially consistent (a plain load on x86): a launch that saw its
    // stream as the tail did so in order with the records' takes.
    if (tail_.load(std::memory_order_seq_cst) == stream) [[likely]]
      return;
    switch_to(stream);
  }
  CUstream tail() const noexcept { return tail_.load(std::memory_order_seq_cst); }

  struct Taken {
    std::array<CUstream, kCapacity + 1> streams{};
    std::size_t count = 0;
    bool overflowed = false;  // the batch went to streams the set could not keep
  };
  // For a record (under the tracker's lock), after the launch count it
  // covers was read: the streams filed since the last take and the tail,
  // once each; the set is emptied and the tail filed again. Every launch
  // counted went to one of them, or to a stream made the tail and not yet
  // filed while this ran, which a later record takes.
  Taken take() noexcept;
  // A record that did not cover them (under the lock): the streams taken,
  // but `covered`, are filed again, and the overflow kept.
  void put_back(const Taken& taken, CUstream covered) noexcept;
  // Whether `stream` is the tail or filed.
  bool holds(CUstream stream) const noexcept;
  // The application destroys `stream` (under the lock, after any record
  // that covers it): it leaves the set and the tail.
  void forget(CUstream stream) noexcept;
  // Fork child, and the start: no tail, an empty set.
  void clear() noexcept;

 private:
  void switch_to(CUstream stream) noexcept;
  void file(CUstream stream) noexcept;

  std::atomic<CUstream> tail_;
  std::array<std::atomic<CUstream>, kCapacity> set_;
  std::atomic<bool> overflowed_{false};
};

}  // namespace cushare::shim::gate
