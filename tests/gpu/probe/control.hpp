// Commands from the orchestrator arrive as lines on stdin ("go", "release").
// End of input counts as "release", so a probe never outlives an orchestrator
// that died without cleaning up.
#pragma once

#include <string>

namespace cushare::gpuprobe {

class ControlChannel {
 public:
  // Waits up to timeout_ms (-1: forever) for the next line; returns "" on
  // timeout and "release" at end of input.
  std::string nextLine(int timeout_ms);

  // True once "release" (or end of input) has been seen; never blocks.
  bool releaseRequested();

 private:
  std::string buffer_;
  bool released_ = false;
};

}  // namespace cushare::gpuprobe
