#include "plugin/node/plugin_service.hpp"

#include <spdlog/spdlog.h>

#include "plugin/core/allocation_plan.hpp"
#include "plugin/core/device_id.hpp"
#include "plugin/core/preferred_allocation.hpp"

namespace cushare::plugin {
namespace {

constexpr std::chrono::milliseconds kStreamPoll{200};

std::vector<std::string> to_vector(const google::protobuf::RepeatedPtrField<std::string>& ids) {
  return {ids.begin(), ids.end()};
}

void fill_response(const AllocationPlan& plan, v1beta1::ContainerAllocateResponse& out) {
  for (const auto& [k, v] : plan.env) (*out.mutable_envs())[k] = v;
  for (const auto& m : plan.mounts) {
    auto* mount = out.add_mounts();
    mount->set_container_path(m.container_path);
    mount->set_host_path(m.host_path);
    mount->set_read_only(m.read_only);
  }
  for (const auto& d : plan.devices) {
    auto* spec = out.add_devices();
    spec->set_container_path(d.container_path);
    spec->set_host_path(d.host_path);
    spec->set_permissions(d.permissions);
  }
  for (const auto& [k, v] : plan.annotations) (*out.mutable_annotations())[k] = v;
  for (const auto& name : plan.cdi_devices) out.add_cdi_devices()->set_name(name);
}

}  // namespace

v1beta1::ListAndWatchResponse build_snapshot(const Inventory& inventory,
                                             const std::set<std::string>& unhealthy_gpus,
                                             unsigned units_per_gpu) {
  v1beta1::ListAndWatchResponse resp;
  for (const auto& gpu : inventory.gpus) {
    const bool healthy = !unhealthy_gpus.contains(gpu.uuid);
    for (unsigned u = 0; u < units_per_gpu; ++u) {
      auto* dev = resp.add_devices();
      dev->set_id(format_device_id(gpu.uuid, u));
      dev->set_health(healthy ? kHealthy : kUnhealthy);
      if (gpu.numa_node != kUnknownNumaNode) {
        dev->mutable_topology()->add_nodes()->set_id(gpu.numa_node);
      }
    }
  }
  return resp;
}

PluginService::PluginService(const Inventory& inventory, const PluginConfig& config,
                             DeviceHealth& health, AllocationStore& store,
                             std::function<void()> on_stream_end)
    : inventory_(inventory),
      config_(config),
      health_(health),
      store_(store),
      on_stream_end_(std::move(on_stream_end)) {}

void PluginService::stop() {
  stopping_ = true;
}

grpc::Status PluginService::GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                                   v1beta1::DevicePluginOptions* resp) {
  resp->set_pre_start_required(false);
  resp->set_get_preferred_allocation_available(true);
  return grpc::Status::OK;
}

grpc::Status PluginService::ListAndWatch(
    grpc::ServerContext* ctx, const v1beta1::Empty*,
    grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  ++open_streams_;
  spdlog::info("ListAndWatch: stream opened");
  std::uint64_t sent_version = health_.version();
  bool ok =
      writer->Write(build_snapshot(inventory_, health_.unhealthy_gpus(), config_.units_per_gpu));
  while (ok && !stopping_ && !ctx->IsCancelled()) {
    const std::uint64_t v = health_.wait_for_change(sent_version, kStreamPoll);
    if (v == sent_version) continue;
    sent_version = v;
    const auto unhealthy = health_.unhealthy_gpus();
    spdlog::info("ListAndWatch: sending snapshot ({} unhealthy GPU(s))", unhealthy.size());
    ok = writer->Write(build_snapshot(inventory_, unhealthy, config_.units_per_gpu));
  }
  const int left = --open_streams_;
  spdlog::info(
      "ListAndWatch: stream ended ({})",
      stopping_ ? "plugin restarting" : (ok ? "cancelled by the kubelet" : "write failed"));
  if (!stopping_ && left == 0 && on_stream_end_) on_stream_end_();
  return grpc::Status::OK;
}

grpc::Status PluginService::GetPreferredAllocation(grpc::ServerContext*,
                                                   const v1beta1::PreferredAllocationRequest* req,
                                                   v1beta1::PreferredAllocationResponse* resp) {
  for (const auto& creq : req->container_requests()) {
    if (creq.allocation_size() < 0) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "negative allocation_size"};
    }
    const auto available = to_vector(creq.available_deviceids());
    const auto must = to_vector(creq.must_include_deviceids());
    const auto chosen = prefer_allocation(
        inventory_, available, must, static_cast<std::size_t>(creq.allocation_size()),
        config_.packing, config_.gpu_spanning, config_.units_per_gpu);
    auto* out = resp->add_container_responses();
    for (const auto& id : chosen) out->add_deviceids(id);
  }
  return grpc::Status::OK;
}

grpc::Status PluginService::Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* req,
                                     v1beta1::AllocateResponse* resp) {
  for (const auto& creq : req->container_requests()) {
    const auto ids = to_vector(creq.devices_ids());
    AllocationPlan plan;
    try {
      plan = plan_allocation(inventory_, ids, config_);
    } catch (const AllocationError& e) {
      spdlog::warn("Allocate refused: {}", e.what());
      return {grpc::StatusCode::INVALID_ARGUMENT, e.what()};
    }
    try {
      store_.write(plan);
    } catch (const std::exception& e) {
      spdlog::error("Allocate {}: cannot write the allocation: {}", plan.alloc_id, e.what());
      return {grpc::StatusCode::INTERNAL, std::string("cannot write allocation: ") + e.what()};
    }
    std::string shares;
    for (const auto& g : plan.gpus) {
      shares += fmt::format("{}{} x{} ({} B, {}%)", shares.empty() ? "" : ", ", g.uuid, g.units,
                            g.memory_limit_bytes, g.compute_limit_pct);
    }
    spdlog::info("Allocate {}: {}", plan.alloc_id, shares);
    fill_response(plan, *resp->add_container_responses());
  }
  return grpc::Status::OK;
}

grpc::Status PluginService::PreStartContainer(grpc::ServerContext*,
                                              const v1beta1::PreStartContainerRequest*,
                                              v1beta1::PreStartContainerResponse*) {
  return grpc::Status::OK;
}

}  // namespace cushare::plugin
