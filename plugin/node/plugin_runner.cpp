#include "plugin/node/plugin_runner.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <thread>

#include <device_plugin_v1beta1.grpc.pb.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "plugin/node/kubelet_watcher.hpp"

namespace cushare::plugin {
namespace fs = std::filesystem;
namespace {

constexpr char kApiVersion[] = "v1beta1";
constexpr auto kRegisterRetry = std::chrono::seconds(2);
constexpr auto kSettle = std::chrono::milliseconds(300);
constexpr auto kRegisterDeadline = std::chrono::seconds(15);  // the kubelet dials back for 10 s

std::string unique_socket_name() {
  // A fresh name per instance: a late disconnect of an old instance can then
  // never take down the endpoint of this one (kubernetes#121994).
  std::random_device rd;
  return fmt::format("cushare-vgpu-{:08x}.sock", rd());
}

}  // namespace

PluginRunner::PluginRunner(const Inventory& inventory, const PluginConfig& config,
                           DeviceHealth& health, AllocationStore& store)
    : inventory_(inventory),
      config_(config),
      health_(health),
      store_(store),
      socket_name_(config.socket_name.empty() ? unique_socket_name() : config.socket_name) {}

PluginRunner::~PluginRunner() {
  stop_serving();
}

std::string PluginRunner::socket_path() const {
  return (fs::path(config_.device_plugin_dir) / socket_name_).string();
}

void PluginRunner::post(Trigger t) {
  // Notified under the lock: once run() has seen the trigger, the poster is
  // done with cv_, so the runner may be destroyed right after.
  std::lock_guard lock(mu_);
  triggers_.push_back(t);
  cv_.notify_all();
}

void PluginRunner::request_shutdown() {
  post(Trigger::kShutdown);
}

void PluginRunner::serve() {
  stop_serving();
  std::error_code ec;
  fs::remove(socket_path(), ec);
  service_ = std::make_unique<PluginService>(inventory_, config_, health_, store_,
                                             [this] { post(Trigger::kStreamEnded); });
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket_path(), grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_) throw std::runtime_error(fmt::format("cannot serve on {}", socket_path()));
  spdlog::info("serving {} on {}", config_.resource_name, socket_path());
}

void PluginRunner::stop_serving() {
  if (!server_) return;
  service_->stop();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  server_.reset();
  service_.reset();
}

bool PluginRunner::register_with_kubelet() {
  const std::string kubelet = (fs::path(config_.device_plugin_dir) / "kubelet.sock").string();
  auto channel = grpc::CreateChannel("unix://" + kubelet, grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  v1beta1::RegisterRequest req;
  req.set_version(kApiVersion);
  req.set_endpoint(socket_name_);
  req.set_resource_name(config_.resource_name);
  req.mutable_options()->set_get_preferred_allocation_available(true);
  req.mutable_options()->set_pre_start_required(false);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kRegisterDeadline);
  v1beta1::Empty resp;
  const auto status = stub->Register(&ctx, req, &resp);
  if (!status.ok()) {
    spdlog::warn("Register with {} failed: {}", kubelet, status.error_message());
    return false;
  }
  spdlog::info("registered {} ({} GPU(s) x {} units) with the kubelet", config_.resource_name,
               inventory_.gpus.size(), config_.units_per_gpu);
  return true;
}

void PluginRunner::run() {
  KubeletWatcher watcher(config_.device_plugin_dir, socket_name_, [this](DirEvent e) {
    post(e == DirEvent::kKubeletSocketCreated ? Trigger::kKubeletRestarted
                                              : Trigger::kOwnSocketRemoved);
  });
  watcher.start();
  serve();
  bool registered = register_with_kubelet();
  for (;;) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, kRegisterRetry, [&] { return !triggers_.empty(); })) {
      lock.unlock();
      if (!registered) registered = register_with_kubelet();
      continue;
    }
    // A kubelet restart arrives as several events (stream ended, our socket
    // deleted, kubelet.sock created): let them land, then act once.
    lock.unlock();
    std::this_thread::sleep_for(kSettle);
    lock.lock();
    std::deque<Trigger> batch;
    batch.swap(triggers_);
    lock.unlock();
    if (std::find(batch.begin(), batch.end(), Trigger::kShutdown) != batch.end()) {
      stop_serving();
      std::error_code ec;
      fs::remove(socket_path(), ec);
      watcher.stop();
      return;
    }
    for (const Trigger t : batch) {
      spdlog::info("{}", t == Trigger::kKubeletRestarted   ? "kubelet.sock was recreated"
                         : t == Trigger::kOwnSocketRemoved ? "our socket was removed"
                                                           : "the kubelet closed ListAndWatch");
    }
    // The kubelet deletes every socket before it serves a fresh kubelet.sock,
    // so a socket that still exists was served after that: keep it.
    if (!fs::exists(socket_path())) {
      spdlog::info("serving {} again", socket_path());
      serve();
    }
    registered = register_with_kubelet();
  }
}

}  // namespace cushare::plugin
