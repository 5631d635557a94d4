#include "tests/gpu/probe/messages.hpp"

#include <cstdio>

namespace cushare::gpuprobe {

void emit(const nlohmann::json& msg) {
  const std::string line = kMessagePrefix + msg.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

}  // namespace cushare::gpuprobe
