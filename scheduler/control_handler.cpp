#include "scheduler/control_handler.hpp"

#include <unistd.h>

#include <algorithm>

#include "node/gpu_info.hpp"
#include "node/region_reader.hpp"
#include "node/run_dir.hpp"
#include "node/set_request.hpp"
#include "node/status_json.hpp"

namespace cushare::sched {

using nlohmann::json;

namespace {

json ok(json result) {
  return json{{"ok", true}, {"result", std::move(result)}};
}
json fail(const std::string& code, const std::string& message) {
  return json{{"ok", false}, {"code", code}, {"error", message}};
}

}  // namespace

RunDirControlHandler::RunDirControlHandler(ControlHandlerConfig config)
    : config_(std::move(config)) {
  if (!config_.now) config_.now = tools::read_clocks;
  if (!config_.gpus) config_.gpus = tools::query_gpus_nvml;
}

const std::vector<tools::GpuInfo>& RunDirControlHandler::gpus() {
  if (!gpus_loaded_) {
    gpus_ = config_.gpus();
    gpus_loaded_ = true;
  }
  return gpus_;
}

json RunDirControlHandler::handle(const json& request, const PeerCredentials& peer) {
  const std::string cmd = request.value("cmd", "");
  try {
    if (cmd == "ping") return ok(json{{"pid", ::getpid()}, {"protocol", 1}});
    if (cmd == "status") return ok(status());
    if (cmd == "inspect") return ok(inspect(request));
    if (cmd == "set") return set(request, peer);
    return fail("bad_request", "unknown command '" + cmd + "' (known: ping, status, inspect, set)");
  } catch (const tools::InvalidRequest& e) {
    return fail("bad_request", e.what());
  } catch (const tools::NotFoundError& e) {
    return fail("not_found", e.what());
  } catch (const tools::RegionReadError& e) {
    return fail("bad_region", e.what());
  } catch (const json::exception& e) {
    return fail("bad_request", std::string("malformed request: ") + e.what());
  }
}

json RunDirControlHandler::status() {
  const tools::Now now = config_.now();
  tools::Status status = tools::read_status_from_regions(config_.run_dir.string(), gpus(), now);
  status.source = "daemon";
  // The daemon answering is the proof it is up, whatever the heartbeats say.
  status.daemon.up = true;
  status.daemon.pid = static_cast<std::uint32_t>(::getpid());
  if (config_.quantum_ns != 0) status.daemon.quantum_ns = config_.quantum_ns;
  return tools::to_json(status);
}

json RunDirControlHandler::inspect(const json& request) {
  const std::string id = request.at("alloc").get<std::string>();
  const tools::Allocation alloc =
      tools::read_allocation(config_.run_dir.string(), id, config_.now());
  return json{{"allocation", tools::to_json(alloc)}, {"gpus", [&] {
                                                        json list = json::array();
                                                        for (const auto& g : gpus())
                                                          list.push_back(tools::to_json(g));
                                                        return list;
                                                      }()}};
}

json RunDirControlHandler::set(const json& request, const PeerCredentials& peer) {
  const bool allowed = peer.uid == 0 || peer.uid == ::geteuid() ||
                       std::find(config_.set_allowed_uids.begin(), config_.set_allowed_uids.end(),
                                 peer.uid) != config_.set_allowed_uids.end();
  if (!allowed)
    return fail("forbidden",
                "uid " + std::to_string(peer.uid) +
                    " may not change limits: run `cusharectl set` as root or as the daemon's user");
  const tools::SetRequest set = tools::set_request_from_json(request.at("set"));
  if (auto error = tools::check_allocation_id(set.alloc)) throw tools::NotFoundError(*error);
  const std::string folder = tools::allocation_dir(config_.run_dir.string(), set.alloc);
  if (!std::filesystem::is_directory(folder))
    throw tools::NotFoundError("no allocation '" + set.alloc + "' in " + config_.run_dir.string() +
                               ": see `cusharectl status`");
  tools::LimitsFile limits =
      tools::open_limits(folder + "/" + tools::kLimitsName, /*writable=*/true);
  std::optional<tools::UsageFile> usage;
  if (std::filesystem::exists(folder + "/" + tools::kUsageName))
    usage = tools::open_usage(folder + "/" + tools::kUsageName);
  const tools::SetOutcome outcome = tools::apply_set(
      limits.mapping.mutable_region(), usage ? usage->region() : nullptr, set, gpus());
  return ok(tools::to_json(outcome));
}

}  // namespace cushare::sched
