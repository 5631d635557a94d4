#pragma once
// fakegpu's knobs, read from the environment and validated. A bad value is an
// error naming the variable; the driver then fails cuInit (fail loudly, never
// silently simulate a different machine than the test asked for).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace fakegpu {

struct DeviceSpec {
  std::string name;
  uint64_t memory = 0;
  uint32_t sms = 0;
  int cc_major = 9;
  int cc_minor = 0;
};

struct Config {
  std::vector<DeviceSpec> devices;
  std::string state_path;
  uint64_t context_overhead = 300ull << 20;
  uint64_t context_create_us = 0;  // wall time a context creation takes after its memory
  uint64_t timeslice_ns = 2'000'000;
  uint64_t kernel_ns = 10'000;
  int driver_version = 13000;
  uint64_t copy_bytes_per_s = 25ull << 30;   // host<->device; device-local is 10x
  uint64_t host_backing_limit = 1ull << 30;  // per process, bytes of real host backing
  uint32_t queue_depth = 1024;               // pending launches per context
  // A stream or event handle used after it was destroyed: the driver's error
  // (false), or abort the process (true; a real driver may act on freed
  // memory there, so tests of callers that must never do it ask for the
  // abort).
  bool abort_on_freed_handle = false;
};

struct ConfigResult {
  std::optional<Config> config;
  std::string error;  // set when config is empty
};

using EnvLookup = std::function<const char*(const char*)>;

// Reads every FAKEGPU_* knob; `lookup` defaults to getenv.
ConfigResult load_config(const EnvLookup& lookup = nullptr);

// "name:memory:SMs[:major.minor]" separated by ';'.
std::optional<std::vector<DeviceSpec>> parse_devices(const std::string& text, std::string& error);

// Compute capability guessed from a marketing name (H100 -> 9.0, A100 -> 8.0, ...).
void default_compute_capability(const std::string& name, int& major, int& minor);

}  // namespace fakegpu
