// Which pod, namespace and container an allocation belongs to, as the device
// plugin learns it from the kubelet's PodResources List (Allocate itself
// carries no pod identity) and hands it to cushared for metrics labels:
//
//   RUN/identity/              the plugin's (0755), never mounted into a container
//   RUN/identity/<alloc-id>    {"pod": ..., "namespace": ..., "container": ...} (0644)
//
// The allocation's own folder is writable by its containers, so the identity
// never lives there: a tenant could name itself after another pod. Header-only
// (nlohmann-json): the plugin and the daemon use it, the shim never does.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace cushare::shm {

inline constexpr char kIdentityDirName[] = "identity";
inline constexpr unsigned kIdentityDirMode = 0755;
inline constexpr unsigned kIdentityFileMode = 0644;
// Kubernetes names are at most 253 characters; anything larger is not ours.
inline constexpr std::size_t kMaxIdentityFileBytes = 4096;

struct PodIdentity {
  std::string pod;
  std::string pod_namespace;
  std::string container;
  friend bool operator==(const PodIdentity&, const PodIdentity&) = default;
};

inline std::string format_pod_identity(const PodIdentity& id) {
  return nlohmann::json{
             {"pod", id.pod}, {"namespace", id.pod_namespace}, {"container", id.container}}
             .dump() +
         "\n";
}

// nullopt for anything but an object with the three string members, each
// non-empty and at most 253 bytes.
inline std::optional<PodIdentity> parse_pod_identity(std::string_view text) {
  if (text.size() > kMaxIdentityFileBytes) return std::nullopt;
  const auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return std::nullopt;
  auto field = [&](const char* key) -> std::optional<std::string> {
    const auto it = doc.find(key);
    if (it == doc.end() || !it->is_string()) return std::nullopt;
    auto value = it->get<std::string>();
    if (value.empty() || value.size() > 253) return std::nullopt;
    return value;
  };
  auto pod = field("pod"), ns = field("namespace"), container = field("container");
  if (!pod || !ns || !container) return std::nullopt;
  return PodIdentity{std::move(*pod), std::move(*ns), std::move(*container)};
}

}  // namespace cushare::shm
