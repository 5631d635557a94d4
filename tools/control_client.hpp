// The client side of the daemon's control socket (protocol: docs/cli.md,
// "Control socket"): connect, send one JSON line, read one JSON line.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace cushare::tools {

// Nobody serves the socket (missing file, refused, no permission). Callers
// that can work from the regions fall back; others report it.
class DaemonUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The daemon answered, but not with a well-formed response, or too late.
class ControlProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A well-formed {"ok": false, ...} answer.
class ControlRequestFailed : public std::runtime_error {
 public:
  ControlRequestFailed(std::string code, const std::string& message)
      : std::runtime_error(message), code_(std::move(code)) {}
  const std::string& code() const { return code_; }

 private:
  std::string code_;
};

// Sends `request` and returns the response's "result". Throws the errors above.
nlohmann::json control_call(const std::string& socket_path, const nlohmann::json& request,
                            std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace cushare::tools
