// The shim's logger: spdlog, level from CUSHARE_LOG_LEVEL (default warn),
// sink CUSHARE_LOG_FILE (default stderr). Created on first use, never
// registered in spdlog's global registry (the host program may use spdlog
// itself), never destroyed (atexit handlers may still log).
#pragma once

#include <spdlog/logger.h>

namespace cushare::shim {

spdlog::logger& log() noexcept;

}  // namespace cushare::shim
