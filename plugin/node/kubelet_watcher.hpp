// Watches the device-plugin directory with inotify: the kubelet recreating
// kubelet.sock (it restarted) or our own socket disappearing (the kubelet
// deletes every socket when it restarts) means the plugin must serve and
// register again.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace cushare::plugin {

enum class DirEvent { kKubeletSocketCreated, kOwnSocketRemoved };

class KubeletWatcher {
 public:
  KubeletWatcher(std::string dir, std::string own_socket_name,
                 std::function<void(DirEvent)> on_event);
  ~KubeletWatcher();
  KubeletWatcher(const KubeletWatcher&) = delete;
  KubeletWatcher& operator=(const KubeletWatcher&) = delete;

  void start();  // throws std::runtime_error when inotify cannot watch the folder
  void stop();

 private:
  void run();

  std::string dir_;
  std::string own_socket_name_;
  std::function<void(DirEvent)> on_event_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace cushare::plugin
