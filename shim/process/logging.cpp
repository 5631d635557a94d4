#include "shim/process/logging.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>
#include <memory>
#include <string>

namespace cushare::shim {
namespace {

spdlog::logger* make_logger() noexcept {
  std::shared_ptr<spdlog::sinks::sink> sink;
  std::string sink_error;
  if (const char* file = std::getenv("CUSHARE_LOG_FILE"); file && *file) {
    try {
      sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(file, /*truncate=*/false);
    } catch (const std::exception& e) {
      sink_error = e.what();
    }
  }
  if (!sink) sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto* logger = new spdlog::logger("cushare", sink);
  logger->set_pattern("[cushare %l] pid %P: %v");
  logger->set_level(spdlog::level::warn);
  logger->flush_on(spdlog::level::trace);
  if (const char* level = std::getenv("CUSHARE_LOG_LEVEL"); level && *level) {
    auto parsed = spdlog::level::from_str(level);
    // from_str maps unknown names to "off": never let a typo silence errors.
    if (parsed == spdlog::level::off && std::string(level) != "off") {
      logger->warn(
          "CUSHARE_LOG_LEVEL='{}' is not a level (trace, debug, info, warn, error, "
          "critical, off); using warn",
          level);
    } else {
      logger->set_level(parsed);
    }
  }
  if (!sink_error.empty()) {
    logger->error("CUSHARE_LOG_FILE: cannot open ({}); logging to stderr", sink_error);
  }
  return logger;
}

}  // namespace

spdlog::logger& log() noexcept {
  static spdlog::logger* logger = make_logger();
  return *logger;
}

}  // namespace cushare::shim
