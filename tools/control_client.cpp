#include "tools/control_client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cushare::tools {

namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::chrono::milliseconds remaining(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() > 0 ? left : std::chrono::milliseconds(0);
}

}  // namespace

nlohmann::json control_call(const std::string& socket_path, const nlohmann::json& request,
                            std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path))
    throw DaemonUnavailable("control socket path " + socket_path + " is too long");
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);

  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) throw DaemonUnavailable(std::string("socket: ") + std::strerror(errno));
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    if (err == ENOENT)
      throw DaemonUnavailable("cushared is not running (no control socket at " + socket_path +
                              "): start it, e.g. `systemctl start cushared`");
    if (err == ECONNREFUSED)
      throw DaemonUnavailable(
          "cushared is not running (" + socket_path +
          " refuses connections; stale socket): start it, e.g. `systemctl start cushared`");
    if (err == EACCES)
      throw DaemonUnavailable("permission denied connecting to " + socket_path +
                              ": run as root or in the daemon's group");
    throw DaemonUnavailable("cannot connect to " + socket_path + ": " + std::strerror(err));
  }

  const std::string line = request.dump() + "\n";
  std::size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n = ::send(fd.get(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw ControlProtocolError("lost the connection to cushared while sending: " +
                                 std::string(std::strerror(errno)));
    }
    sent += static_cast<std::size_t>(n);
  }

  std::string reply;
  for (;;) {
    const std::size_t newline = reply.find('\n');
    if (newline != std::string::npos) {
      reply.resize(newline);
      break;
    }
    pollfd pfd{fd.get(), POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(remaining(deadline).count()));
    if (ready == 0)
      throw ControlProtocolError("cushared did not answer within " +
                                 std::to_string(timeout.count()) +
                                 " ms: check its log (journalctl -u cushared)");
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw ControlProtocolError(std::string("poll: ") + std::strerror(errno));
    }
    char buf[8192];
    const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n == 0) throw ControlProtocolError("cushared closed the connection without answering");
    if (n < 0) {
      if (errno == EINTR) continue;
      throw ControlProtocolError(std::string("recv: ") + std::strerror(errno));
    }
    reply.append(buf, static_cast<std::size_t>(n));
  }

  const nlohmann::json response = nlohmann::json::parse(reply, nullptr, false);
  if (response.is_discarded() || !response.is_object() || !response.contains("ok"))
    throw ControlProtocolError(
        "cushared sent a malformed answer (is it the same version as cusharectl?)");
  if (!response.at("ok").get<bool>())
    throw ControlRequestFailed(response.value("code", "failed"),
                               response.value("error", "request failed"));
  return response.value("result", nlohmann::json::object());
}

}  // namespace cushare::tools
