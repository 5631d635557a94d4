// Keeps RUN/identity/ (shm/pod_identity.hpp) in step with the kubelet: every
// podIdentityIntervalSeconds it lists the pods (PodResources List) and writes
// or removes one file per allocation, so cushared can label an allocation's
// metrics with its pod. The folder is the node's: no container mounts it.
#pragma once

#include "plugin/core/plugin_config.hpp"
#include "plugin/node/periodic_task.hpp"

namespace cushare::plugin {

class IdentityPublisher {
 public:
  explicit IdentityPublisher(const PluginConfig& config)
      : config_(config),
        task_("pod identity update", config.pod_identity_interval, [this] { run_once(); }) {}

  void start() { task_.start(); }
  void stop() { task_.stop(); }
  // One pass; false when the kubelet could not be asked (nothing changed).
  bool run_once();

 private:
  const PluginConfig& config_;
  PeriodicTask task_;
};

}  // namespace cushare::plugin
