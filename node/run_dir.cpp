#include "node/run_dir.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace cushare::tools {

namespace fs = std::filesystem;

std::string default_run_dir() {
  const char* env = std::getenv("CUSHARE_RUN_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(kDefaultRunDir);
}

RunDirKind detect_run_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec))
    throw NotFoundError(
        "run dir " + dir +
        " does not exist: pass --run-dir DIR or set CUSHARE_RUN_DIR (is cushared running?)");
  if (!fs::is_directory(dir, ec)) throw NotFoundError("run dir " + dir + " is not a directory");
  // An allocation folder holds its regions directly; a node's holds alloc/.
  if (fs::exists(fs::path(dir) / kLimitsName, ec) &&
      !fs::is_directory(fs::path(dir) / kAllocDirName, ec))
    return RunDirKind::kAllocation;
  return RunDirKind::kNode;
}

std::string socket_path(const std::string& run_dir) {
  return (fs::path(run_dir) / kSocketName).string();
}

std::string allocation_dir(const std::string& run_dir, const std::string& id) {
  return (fs::path(run_dir) / kAllocDirName / id).string();
}

std::optional<std::string> check_allocation_id(const std::string& id) {
  const auto allowed = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  };
  if (id.empty()) return "allocation id is empty";
  if (id.size() >= shm::kAllocIdBytes)
    return "allocation id '" + id + "' is longer than " + std::to_string(shm::kAllocIdBytes - 1) +
           " characters";
  if (id.front() == '.' || !std::all_of(id.begin(), id.end(), allowed))
    return "allocation id '" + id +
           "' may only use letters, digits, '.', '_' and '-' (not first '.')";
  return std::nullopt;
}

std::vector<std::string> list_allocation_ids(const std::string& run_dir) {
  std::vector<std::string> ids;
  std::error_code ec;
  const fs::path root = fs::path(run_dir) / kAllocDirName;
  if (!fs::is_directory(root, ec)) return ids;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory(ec)) continue;
    const std::string name = entry.path().filename().string();
    if (check_allocation_id(name)) continue;  // not one of ours (e.g. a temp folder)
    ids.push_back(name);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

RegionViews AllocationFiles::views() const {
  return RegionViews{limits.region(), usage ? usage->region() : nullptr};
}

AllocationFiles open_allocation(const std::string& folder) {
  AllocationFiles files{open_limits((fs::path(folder) / kLimitsName).string()), std::nullopt};
  std::error_code ec;
  const fs::path usage = fs::path(folder) / kUsageName;
  if (fs::exists(usage, ec)) files.usage = open_usage(usage.string());
  return files;
}

Status read_status_from_regions(const std::string& run_dir, std::vector<GpuInfo> gpus,
                                const Now& now) {
  Status status;
  status.run_dir = run_dir;
  status.kind = detect_run_dir(run_dir);
  status.source = "regions";
  status.generated_unix_ns = now.unix_ns;
  status.gpus = std::move(gpus);

  std::vector<std::pair<std::string, std::string>> folders;  // id, path
  if (status.kind == RunDirKind::kAllocation) {
    folders.emplace_back("", run_dir);
  } else {
    for (const auto& id : list_allocation_ids(run_dir))
      folders.emplace_back(id, allocation_dir(run_dir, id));
  }
  std::vector<AllocationFiles> open;
  for (const auto& [id, folder] : folders) {
    try {
      AllocationFiles files = open_allocation(folder);
      Allocation alloc = allocation_from_regions(files.views(), folder, now);
      if (!id.empty()) alloc.id = id;  // on a node the folder name is the id commands use
      status.allocations.push_back(std::move(alloc));
      open.push_back(std::move(files));
    } catch (const RegionReadError& e) {
      status.problems.push_back(Problem{id, folder, e.what()});
    }
  }
  std::vector<RegionViews> views;
  views.reserve(open.size());
  for (const auto& files : open) views.push_back(files.views());
  status.daemon = daemon_from_regions(views, now);
  return status;
}

Allocation read_allocation(const std::string& run_dir, const std::string& id, const Now& now) {
  const RunDirKind kind = detect_run_dir(run_dir);
  std::string folder = run_dir;
  if (kind == RunDirKind::kNode) {
    if (auto error = check_allocation_id(id)) throw NotFoundError(*error);
    folder = allocation_dir(run_dir, id);
    std::error_code ec;
    if (!fs::is_directory(folder, ec))
      throw NotFoundError("no allocation '" + id + "' in " + run_dir +
                          ": see `cusharectl status` for the allocations there");
  }
  AllocationFiles files = open_allocation(folder);
  Allocation alloc = allocation_from_regions(files.views(), folder, now);
  if (kind == RunDirKind::kNode) {
    alloc.id = id;
  } else if (!id.empty() && id != alloc.id) {
    throw NotFoundError("this run dir is allocation '" + alloc.id + "', not '" + id + "'");
  }
  return alloc;
}

}  // namespace cushare::tools
