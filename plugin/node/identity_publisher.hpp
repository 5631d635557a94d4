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
        task_("pod identity update", config.pod_identity_interval, [this] { RunOnce(); }) {}

  void Start() { task_.Start(); }
  void Stop() { task_.Stop(); }
  // One pass; false when the kubelet could not be asked (nothing changed).
  bool RunOnce();

 private:
  const PluginConfig& config_;
  PeriodicTask task_;
};

}  // namespace cushare::plugin
