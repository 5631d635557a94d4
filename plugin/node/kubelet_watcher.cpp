#include "plugin/node/kubelet_watcher.hpp"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace cushare::plugin {

inline constexpr char kKubeletSocketName[] = "kubelet.sock";

KubeletWatcher::KubeletWatcher(std::string dir, std::string own_socket_name,
                               std::function<void(DirEvent)> on_event)
    : dir_(std::move(dir)),
      own_socket_name_(std::move(own_socket_name)),
      on_event_(std::move(on_event)) {}

KubeletWatcher::~KubeletWatcher() {
  stop();
}

void KubeletWatcher::start() {
  fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(fmt::format("inotify_init1: {}", std::strerror(errno)));
  if (inotify_add_watch(fd_, dir_.c_str(), IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM) <
      0) {
    const int err = errno;
    close(fd_);
    fd_ = -1;
    throw std::runtime_error(fmt::format("cannot watch {}: {}", dir_, std::strerror(err)));
  }
  thread_ = std::thread([this] { run(); });
}

void KubeletWatcher::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void KubeletWatcher::run() {
  alignas(inotify_event) char buf[4096];
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) continue;
    for (ssize_t off = 0; off < n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      if (ev->len == 0) continue;
      const std::string name = ev->name;
      if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) && name == kKubeletSocketName) {
        spdlog::info("{}/{} was created: the kubelet restarted", dir_, name);
        on_event_(DirEvent::kKubeletSocketCreated);
      } else if ((ev->mask & (IN_DELETE | IN_MOVED_FROM)) && name == own_socket_name_) {
        on_event_(DirEvent::kOwnSocketRemoved);
      }
    }
  }
}

}  // namespace cushare::plugin
