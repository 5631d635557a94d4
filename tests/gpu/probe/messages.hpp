// Messages to the orchestrator: one JSON object per line on stdout, prefixed
// so that the orchestrator can tell them from anything a library prints.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>

namespace cushare::gpuprobe {

inline constexpr char kMessagePrefix[] = "@@cushare ";

// Writes `msg` as one prefixed line and flushes it (the orchestrator reads
// progress lines while the probe runs).
void emit(const nlohmann::json& msg);

// CLOCK_MONOTONIC seconds: the orchestrator (Python time.monotonic) uses the
// same clock, so timestamps of different processes line up.
inline double monotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace cushare::gpuprobe
