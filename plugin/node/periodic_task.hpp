// A thread that runs a task now and then every `interval` until stopped; a
// failing pass is logged and the next one still runs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

namespace cushare::plugin {

class PeriodicTask {
 public:
  PeriodicTask(std::string what, std::chrono::seconds interval, std::function<void()> task)
      : what_(std::move(what)), interval_(interval), task_(std::move(task)) {}
  ~PeriodicTask() { stop(); }
  PeriodicTask(const PeriodicTask&) = delete;
  PeriodicTask& operator=(const PeriodicTask&) = delete;

  void start() {
    thread_ = std::thread([this] {
      std::unique_lock lock(mu_);
      while (!stop_) {
        lock.unlock();
        try {
          task_();
        } catch (const std::exception& e) {
          spdlog::warn("{} failed: {}", what_, e.what());
        }
        lock.lock();
        cv_.wait_for(lock, interval_, [&] { return stop_; });
      }
    });
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::string what_;
  std::chrono::seconds interval_;
  std::function<void()> task_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace cushare::plugin
