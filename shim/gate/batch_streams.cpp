#include "shim/gate/batch_streams.hpp"

namespace cushare::shim::gate {

// The tail first, then the set: a take between the two finds the stream as
// the tail, and files it again.
void BatchStreams::switch_to(CUstream stream) noexcept {
  tail_.store(stream, std::memory_order_seq_cst);
  file(stream);
}

void BatchStreams::file(CUstream stream) noexcept {
  std::atomic<CUstream>* free = nullptr;
  for (auto& slot : set_) {
    const CUstream seen = slot.load(std::memory_order_seq_cst);
    if (seen == stream) return;
    if (seen == none() && !free) free = &slot;
  }
  // Only the slots seen free are tried: a failed compare-exchange is a locked
  // instruction too.
  for (auto* slot = free; slot && slot != set_.data() + set_.size(); ++slot) {
    CUstream seen = slot->load(std::memory_order_seq_cst);
    if (seen == stream) return;
    if (seen != none()) continue;
    if (slot->compare_exchange_strong(seen, stream, std::memory_order_seq_cst) || seen == stream)
      return;
  }
  overflowed_.store(true, std::memory_order_seq_cst);
}

BatchStreams::Taken BatchStreams::take() noexcept {
  Taken out;
  const auto add = [&out](CUstream s) {
    for (std::size_t i = 0; i < out.count; ++i)
      if (out.streams[i] == s) return;
    out.streams[out.count++] = s;
  };
  for (auto& slot : set_) {
    // A stream filed after this load was filed after the launch count the
    // record covers was read: the next take has it.
    if (slot.load(std::memory_order_seq_cst) == none()) continue;
    const CUstream s = slot.exchange(none(), std::memory_order_seq_cst);
    if (s != none()) add(s);
  }
  out.overflowed = overflowed_.exchange(false, std::memory_order_seq_cst);
  // Launches that keep to the tail from here on file nothing: it stays
  // filed for the next record.
  if (const CUstream t = tail(); t != none()) {
    add(t);
    file(t);
  }
  return out;
}

void BatchStreams::put_back(const Taken& taken, CUstream covered) noexcept {
  for (std::size_t i = 0; i < taken.count; ++i)
    if (taken.streams[i] != covered) file(taken.streams[i]);
  if (taken.overflowed) overflowed_.store(true, std::memory_order_seq_cst);
}

bool BatchStreams::holds(CUstream stream) const noexcept {
  if (tail() == stream) return true;
  for (const auto& slot : set_)
    if (slot.load(std::memory_order_seq_cst) == stream) return true;
  return false;
}

void BatchStreams::forget(CUstream stream) noexcept {
  for (auto& slot : set_) {
    CUstream seen = stream;
    slot.compare_exchange_strong(seen, none(), std::memory_order_seq_cst);
  }
  CUstream seen = stream;
  tail_.compare_exchange_strong(seen, none(), std::memory_order_seq_cst);
}

void BatchStreams::clear() noexcept {
  tail_.store(none(), std::memory_order_relaxed);
  for (auto& slot : set_) slot.store(none(), std::memory_order_relaxed);
  overflowed_.store(false, std::memory_order_relaxed);
}

}  // namespace cushare::shim::gate
