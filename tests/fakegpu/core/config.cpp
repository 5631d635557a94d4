#include "tests/fakegpu/core/config.hpp"

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "tests/fakegpu/core/quantity.hpp"

namespace fakegpu {
namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.emplace_back();
  return parts;
}

std::string bad(const char* var, const std::string& value, const std::string& expected) {
  return std::string("fakegpu: invalid ") + var + "='" + value + "': expected " + expected;
}

}  // namespace

void default_compute_capability(const std::string& name, int& major, int& minor) {
  struct Known {
    const char* prefix;
    int major, minor;
  };
  static constexpr Known kKnown[] = {{"B200", 10, 0}, {"B100", 10, 0}, {"H200", 9, 0},
                                     {"H100", 9, 0},  {"GH200", 9, 0}, {"L40", 8, 9},
                                     {"L4", 8, 9},    {"A100", 8, 0},  {"A30", 8, 0},
                                     {"A10", 8, 6},   {"T4", 7, 5},    {"V100", 7, 0}};
  for (const auto& k : kKnown) {
    if (name.rfind(k.prefix, 0) == 0) {
      major = k.major;
      minor = k.minor;
      return;
    }
  }
  major = 9;
  minor = 0;
}

std::optional<std::vector<DeviceSpec>> parse_devices(const std::string& text, std::string& error) {
  std::vector<DeviceSpec> devices;
  for (const std::string& item : split(text, ';')) {
    std::vector<std::string> fields = split(item, ':');
    if (fields.size() < 3 || fields.size() > 4 || fields[0].empty() || fields[0].size() >= 64) {
      error = bad("FAKEGPU_DEVICES", text,
                  "'name:memory:SMs[:major.minor]' separated by ';' (e.g. H100-80GB:80Gi:132)");
      return std::nullopt;
    }
    DeviceSpec spec;
    spec.name = fields[0];
    auto memory = parse_quantity(fields[1]);
    auto sms = parse_uint(fields[2]);
    if (!memory || *memory == 0) {
      error =
          bad("FAKEGPU_DEVICES", text, "a memory size such as 80Gi for device '" + fields[0] + "'");
      return std::nullopt;
    }
    if (!sms || *sms == 0 || *sms > 1024) {
      error = bad("FAKEGPU_DEVICES", text, "an SM count 1..1024 for device '" + fields[0] + "'");
      return std::nullopt;
    }
    spec.memory = *memory;
    spec.sms = static_cast<uint32_t>(*sms);
    default_compute_capability(spec.name, spec.cc_major, spec.cc_minor);
    if (fields.size() == 4) {
      auto parts = split(fields[3], '.');
      auto major = parts.size() == 2 ? parse_uint(parts[0]) : std::nullopt;
      auto minor = parts.size() == 2 ? parse_uint(parts[1]) : std::nullopt;
      if (!major || !minor || *major == 0 || *major > 20 || *minor > 9) {
        error = bad("FAKEGPU_DEVICES", text,
                    "a compute capability such as 9.0 for device '" + fields[0] + "'");
        return std::nullopt;
      }
      spec.cc_major = static_cast<int>(*major);
      spec.cc_minor = static_cast<int>(*minor);
    }
    devices.push_back(spec);
  }
  if (devices.empty() || devices.size() > 8) {
    error = bad("FAKEGPU_DEVICES", text, "1 to 8 devices");
    return std::nullopt;
  }
  return devices;
}

ConfigResult load_config(const EnvLookup& lookup) {
  auto env = [&](const char* name) -> const char* {
    return lookup ? lookup(name) : std::getenv(name);
  };
  Config config;
  ConfigResult result;

  const char* devices = env("FAKEGPU_DEVICES");
  std::string device_text = devices && *devices ? devices : "H100-80GB:80Gi:132";
  auto parsed = parse_devices(device_text, result.error);
  if (!parsed) return result;
  config.devices = *parsed;

  if (const char* state = env("FAKEGPU_STATE"); state && *state) {
    config.state_path = state;
  } else {
    config.state_path = "/tmp/fakegpu-" + std::to_string(getuid()) + ".state";
  }

  struct Knob {
    const char* name;
    uint64_t* target;
    bool quantity;
    uint64_t min, max;
    const char* expected;
  };
  uint64_t driver_version = static_cast<uint64_t>(config.driver_version);
  uint64_t timeslice_us = config.timeslice_ns / 1000;
  uint64_t queue_depth = config.queue_depth;
  const Knob knobs[] = {
      {"FAKEGPU_CONTEXT_OVERHEAD", &config.context_overhead, true, 0, 1ull << 40,
       "a byte quantity such as 300Mi"},
      {"FAKEGPU_CONTEXT_CREATE_US", &config.context_create_us, false, 0, 10'000'000,
       "microseconds, 0..10000000"},
      {"FAKEGPU_TIMESLICE_US", &timeslice_us, false, 50, 10'000'000, "microseconds, 50..10000000"},
      {"FAKEGPU_KERNEL_NS", &config.kernel_ns, false, 0, 3'600'000'000'000ull,
       "nanoseconds, 0..3.6e12"},
      {"FAKEGPU_DRIVER_VERSION", &driver_version, false, 11000, 99990,
       "a CUDA version number 11000..99990 such as 13000"},
      {"FAKEGPU_COPY_BW", &config.copy_bytes_per_s, true, 1 << 20, 1ull << 50,
       "bytes per second as a quantity such as 25Gi (at least 1Mi)"},
      {"FAKEGPU_HOST_BACKING", &config.host_backing_limit, true, 0, 1ull << 40,
       "a byte quantity such as 1Gi (host memory backing device allocations per process)"},
      {"FAKEGPU_QUEUE_DEPTH", &queue_depth, false, 1, 1024,
       "pending launches per context, 1..1024"},
  };
  for (const Knob& knob : knobs) {
    const char* value = env(knob.name);
    if (!value) continue;
    auto parsed_value = knob.quantity ? parse_quantity(value) : parse_uint(value);
    if (!parsed_value || *parsed_value < knob.min || *parsed_value > knob.max) {
      result.error = bad(knob.name, value, knob.expected);
      return result;
    }
    *knob.target = *parsed_value;
  }
  if (driver_version % 10 != 0) {
    result.error =
        bad("FAKEGPU_DRIVER_VERSION", std::to_string(driver_version), "1000*major + 10*minor");
    return result;
  }
  config.driver_version = static_cast<int>(driver_version);
  config.timeslice_ns = timeslice_us * 1000;
  config.queue_depth = static_cast<uint32_t>(queue_depth);
  if (const char* freed = env("FAKEGPU_FREED_HANDLES"); freed && *freed) {
    const std::string policy = freed;
    if (policy != "error" && policy != "abort") {
      result.error = bad("FAKEGPU_FREED_HANDLES", freed, "error or abort");
      return result;
    }
    config.abort_on_freed_handle = policy == "abort";
  }
  result.config = config;
  return result;
}

}  // namespace fakegpu
