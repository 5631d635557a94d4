#pragma once
// Opening, creating and locking the node-wide state file, and telling live
// processes from dead ones (pid + start time, as a pid alone can be reused).
#include <cstdint>
#include <string>

#include "tests/fakegpu/core/config.hpp"
#include "tests/fakegpu/core/layout.hpp"

namespace fakegpu {

uint64_t monotonic_ns();
uint64_t realtime_ns();
void sleep_until_ns(uint64_t deadline_monotonic_ns);

// Start time of a process in clock ticks since boot; 0 if it does not exist or
// is a zombie (the driver frees a process's resources when it exits, before
// its parent reaps it).
uint64_t process_start_ticks(int pid);

class StateFile {
 public:
  // Maps `config.state_path`, creating and initialising it from `config` if
  // it is new. Returns nullptr and sets `error` on failure.
  static StateFile* open(const Config& config, std::string& error);

  SharedState& state() { return *state_; }
  const std::string& path() const { return path_; }

  // Locks the state mutex, repairing the state if a holder died, then
  // advances the engines to now and (at most every 100 ms, or when `reap`)
  // frees the resources of dead processes.
  uint64_t lock(bool reap = false);
  void unlock();

  // Frees every dead process's contexts and memory. Caller holds the lock.
  void reap_dead(uint64_t now);

  // Wipes all processes, contexts, events and counters (fakegpu-stat --reset);
  // devices, their UUIDs and the creation time are re-initialised from config.
  void reset(const Config& config);

 private:
  StateFile(std::string path, SharedState* state) : path_(std::move(path)), state_(state) {}
  void repair_after_owner_death();

  std::string path_;
  SharedState* state_;
};

class StateLock {
 public:
  explicit StateLock(StateFile& file, bool reap = false) : file_(file), now_(file.lock(reap)) {}
  ~StateLock() { file_.unlock(); }
  StateLock(const StateLock&) = delete;
  StateLock& operator=(const StateLock&) = delete;
  uint64_t now() const { return now_; }
  SharedState& state() { return file_.state(); }

 private:
  StateFile& file_;
  uint64_t now_;
};

// Initialises devices and header counters from config (no mutex init).
void init_state_contents(SharedState& s, const Config& config, uint64_t node_id, uint64_t now);

}  // namespace fakegpu
