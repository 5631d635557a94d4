// The daemon's control socket: a Unix stream socket (DIR/cushared.sock)
// speaking newline-delimited JSON, one request line -> one response line
// (protocol in docs/cli.md, "Control socket"). The server owns one thread
// that multiplexes all clients with poll(), so handler calls never run
// concurrently with each other; a slow or silent client cannot block others.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

namespace cushare::sched {

// Who is on the other end (SO_PEERCRED), for authorising changes.
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

class ControlHandler {
 public:
  virtual ~ControlHandler() = default;
  // Returns the complete response object ({"ok": true, "result": ...} or
  // {"ok": false, "code": ..., "error": ...}). Called on the server thread only;
  // exceptions become {"ok": false, "code": "internal"}.
  virtual nlohmann::json handle(const nlohmann::json& request, const PeerCredentials& peer) = 0;
};

struct ControlServerOptions {
  mode_t socket_mode = 0660;     // status for the group too; `set` is checked per request
  std::size_t max_clients = 64;  // further connections are closed at once
  std::size_t max_request_bytes = 1 << 16;
};

class ControlServer {
 public:
  // Binds and starts serving on its own thread. Replaces a stale socket file
  // (nobody accepting); throws std::runtime_error when another server is
  // live at `socket_path` or the socket cannot be made.
  ControlServer(std::filesystem::path socket_path, ControlHandler& handler,
                ControlServerOptions options = {});
  ~ControlServer();  // stop()
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Stops accepting, closes all clients, joins the thread, removes the
  // socket file. Idempotent.
  void stop();

  const std::filesystem::path& socket_path() const { return path_; }
  std::uint64_t requests_served() const { return served_.load(std::memory_order_relaxed); }

 private:
  struct Client {
    std::string in;
    std::string out;
    PeerCredentials peer;
  };
  void serve();
  void accept_clients();
  bool read_client(int fd, Client& client);   // false = close it
  bool write_client(int fd, Client& client);  // false = close it
  std::string respond(const std::string& line, const PeerCredentials& peer);

  std::filesystem::path path_;
  ControlHandler& handler_;
  ControlServerOptions options_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stop() wakes poll()
  std::map<int, Client> clients_;
  std::atomic<std::uint64_t> served_{0};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace cushare::sched
