#include "scheduler/control_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace cushare::sched {

namespace {

std::runtime_error sys_error(const std::string& what, int err) {
  return std::runtime_error(what + ": " + std::strerror(err));
}

sockaddr_un make_address(const std::filesystem::path& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string s = path.string();
  if (s.size() >= sizeof(addr.sun_path))
    throw std::runtime_error("control socket path " + s + " is longer than " +
                             std::to_string(sizeof(addr.sun_path) - 1) +
                             " bytes: use a shorter --run-dir");
  std::memcpy(addr.sun_path, s.c_str(), s.size() + 1);
  return addr;
}

// True when a server accepts connections at `path` (so it must not be replaced).
bool someone_listening(const sockaddr_un& addr) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool live = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return live;
}

nlohmann::json error_response(const std::string& code, const std::string& message) {
  return {{"ok", false}, {"code", code}, {"error", message}};
}

}  // namespace

ControlServer::ControlServer(std::filesystem::path socket_path, ControlHandler& handler,
                             ControlServerOptions options)
    : path_(std::move(socket_path)), handler_(handler), options_(options) {
  const sockaddr_un addr = make_address(path_);
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      throw std::runtime_error(path_.string() +
                               " exists and is not a socket: remove it or use another --run-dir");
    if (someone_listening(addr))
      throw std::runtime_error("another server is already listening on " + path_.string() +
                               ": is cushared already running?");
    ::unlink(path_.c_str());  // stale: left by a daemon that crashed
  }
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) throw sys_error("cannot create the control socket", errno);
  // Bind under a restrictive umask so the socket never exists with wider permissions.
  const mode_t old_mask = ::umask(0177);
  const int bound = ::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int bind_errno = errno;
  ::umask(old_mask);
  if (bound != 0) {
    ::close(listen_fd_);
    throw sys_error("cannot bind the control socket " + path_.string(), bind_errno);
  }
  if (::chmod(path_.c_str(), options_.socket_mode) != 0 || ::listen(listen_fd_, 16) != 0) {
    const int err = errno;
    ::close(listen_fd_);
    ::unlink(path_.c_str());
    throw sys_error("cannot listen on " + path_.string(), err);
  }
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    const int err = errno;
    ::close(listen_fd_);
    ::unlink(path_.c_str());
    throw sys_error("eventfd", err);
  }
  thread_ = std::thread([this] { serve(); });
}

ControlServer::~ControlServer() {
  stop();
}

void ControlServer::stop() {
  if (stopping_.exchange(true)) {
    if (thread_.joinable()) thread_.join();
    return;
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  for (const auto& [fd, client] : clients_) ::close(fd);
  clients_.clear();
  ::close(listen_fd_);
  ::close(wake_fd_);
  ::unlink(path_.c_str());
}

void ControlServer::serve() {
  std::vector<pollfd> fds;
  while (!stopping_.load()) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const auto& [fd, client] : clients_)
      fds.push_back({fd, static_cast<short>(client.out.empty() ? POLLIN : POLLOUT), 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents != 0) return;
    if (fds[1].revents & POLLIN) accept_clients();
    for (std::size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = clients_.find(fds[i].fd);
      if (it == clients_.end()) continue;
      bool keep = true;
      if (fds[i].revents & POLLOUT)
        keep = write_client(it->first, it->second);
      else if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
        keep = read_client(it->first, it->second);
      if (!keep) {
        ::close(it->first);
        clients_.erase(it);
      }
    }
  }
}

void ControlServer::accept_clients() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN: accepted all pending
    if (clients_.size() >= options_.max_clients) {
      ::close(fd);
      continue;
    }
    Client client;
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
      client.peer = PeerCredentials{cred.pid, cred.uid, cred.gid};
    else
      client.peer =
          PeerCredentials{0, static_cast<uid_t>(-1), static_cast<gid_t>(-1)};  // unknown: no rights
    clients_.emplace(fd, std::move(client));
  }
}

bool ControlServer::read_client(int fd, Client& client) {
  char buf[4096];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  if (n == 0) return false;
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  client.in.append(buf, static_cast<std::size_t>(n));
  // Answer every complete line; a client may pipeline several requests.
  std::size_t newline;
  while ((newline = client.in.find('\n')) != std::string::npos) {
    const std::string line = client.in.substr(0, newline);
    client.in.erase(0, newline + 1);
    client.out += respond(line, client.peer);
  }
  if (client.in.size() > options_.max_request_bytes) {
    client.out +=
        error_response("bad_request", "request longer than " +
                                          std::to_string(options_.max_request_bytes) + " bytes")
            .dump() +
        "\n";
    client.in.clear();
  }
  return client.out.empty() || write_client(fd, client);
}

bool ControlServer::write_client(int fd, Client& client) {
  while (!client.out.empty()) {
    const ssize_t n = ::send(fd, client.out.data(), client.out.size(), MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    client.out.erase(0, static_cast<std::size_t>(n));
  }
  return true;
}

std::string ControlServer::respond(const std::string& line, const PeerCredentials& peer) {
  nlohmann::json response;
  nlohmann::json request = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded() || !request.is_object()) {
    response = error_response("bad_request", "request is not a JSON object on one line");
  } else {
    try {
      response = handler_.handle(request, peer);
    } catch (const std::exception& e) {
      response = error_response("internal", e.what());
    }
  }
  served_.fetch_add(1, std::memory_order_relaxed);
  return response.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace cushare::sched
