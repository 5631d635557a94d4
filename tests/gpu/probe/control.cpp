#include "tests/gpu/probe/control.hpp"

#include <poll.h>
#include <unistd.h>

namespace cushare::gpuprobe {

std::string ControlChannel::nextLine(int timeout_ms) {
  for (;;) {
    if (auto nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (line == "release") released_ = true;
      return line;
    }
    if (released_) return "release";
    pollfd pfd{0, POLLIN, 0};
    int n = poll(&pfd, 1, timeout_ms);
    if (n == 0) return "";
    if (n < 0) continue;  // EINTR
    char chunk[256];
    ssize_t got = read(0, chunk, sizeof chunk);
    if (got <= 0) {
      released_ = true;  // EOF or a broken pipe: the orchestrator is gone
      return "release";
    }
    buffer_.append(chunk, static_cast<std::size_t>(got));
  }
}

bool ControlChannel::releaseRequested() {
  while (!released_) {
    if (nextLine(0).empty()) break;
  }
  return released_;
}

}  // namespace cushare::gpuprobe
