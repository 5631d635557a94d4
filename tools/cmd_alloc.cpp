// create / remove: allocation folders for plain Docker or containerd, where no
// device plugin writes them. `create` prints the flags that attach a container.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "node/gpu_info.hpp"
#include "node/region_reader.hpp"
#include "node/run_dir.hpp"
#include "node/set_request.hpp"
#include "shm/limits_seqlock.hpp"
#include "shm/region_file.hpp"
#include "tools/cli_common.hpp"
#include "tools/commands.hpp"
#include "tools/gpu_selector.hpp"
#include "tools/install_paths.hpp"
#include "tools/path_args.hpp"

namespace cushare::tools {

namespace fs = std::filesystem;

namespace {

struct Entry {
  std::string uuid;
  shm::GpuLimitsSnapshot limits;
};

std::vector<Entry> plan_entries(const CreateOptions& o) {
  MemoryLimitArg memory;
  shm::GpuLimitsSnapshot base;
  try {
    memory = parse_memory_limit_arg(o.memory_limit);
    base.compute_limit_pct = parse_compute_limit_arg(o.compute_limit);
    base.weight = o.weight ? parse_weight_arg(*o.weight) : base.compute_limit_pct;
    base.mode = parse_mode_arg(o.mode);
  } catch (const InvalidRequest& e) {
    throw CliError(kExitUsage, e.what());
  }
  if (o.gpus.size() > shm::kMaxGpus)
    throw CliError(kExitUsage, "at most " + std::to_string(shm::kMaxGpus) + " --gpu");
  const bool percent =
      !memory.unlimited && memory.amount.kind == shm::MemoryAmount::Kind::kPercentOfCard;
  const bool any_index = std::any_of(o.gpus.begin(), o.gpus.end(), is_gpu_index);
  const std::vector<GpuInfo> gpus =
      percent || any_index ? query_gpus_nvml() : std::vector<GpuInfo>{};
  std::vector<std::string> uuids;
  try {
    uuids = resolve_gpu_args(o.gpus, gpus);
  } catch (const std::invalid_argument& e) {
    throw CliError(kExitUsage, e.what());
  }
  if (uuids.empty()) uuids.push_back(shm::kAnyGpu);
  std::vector<Entry> entries;
  for (const auto& uuid : uuids) {
    Entry e{uuid, base};
    if (memory.unlimited) {
      e.limits.memory_limit_bytes = shm::kUnlimited;
    } else if (!percent) {
      e.limits.memory_limit_bytes = memory.amount.bytes;
    } else {
      const GpuInfo* info = find_gpu(gpus, uuid);
      if (info == nullptr || !info->memory_total_bytes)
        throw CliError(kExitUsage, "--memory-limit " + o.memory_limit +
                                       " needs the card's size: pass --gpu <UUID> of a GPU "
                                       "NVML can see, or give a quantity such as 8Gi");
      e.limits.memory_limit_bytes =
          shm::resolve_memory_amount(memory.amount, *info->memory_total_bytes);
    }
    entries.push_back(e);
  }
  return entries;
}

// The preload file is the node's, one for every allocation (it names the
// library's path inside containers): never inside an allocation's folder,
// which its containers can write.
fs::path preload_file(const std::string& run_dir) {
  return fs::path(run_dir) / kPreloadName;
}

void write_preload(const fs::path& path) {
  const std::string content = std::string(kContainerLibrary) + "\n";
  {
    std::ifstream in(path);
    std::string current((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in && current == content) return;
  }
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  std::ofstream(tmp) << content;
  ::chmod(tmp.c_str(), 0644);
  std::error_code ec;
  fs::rename(tmp, path, ec);  // a container starting now never sees a partial file
  if (ec) {
    fs::remove(tmp, ec);
    throw CliError(kExitFailure, "cannot write " + path.string() + ": " + ec.message());
  }
}

// docker's --gpus value: every GPU for limits on "*", else exactly the GPUs
// the entries name (a container given other GPUs would find no quota for them).
std::string gpus_flag(const std::vector<Entry>& entries) {
  if (entries.size() == 1 && entries.front().uuid == shm::kAnyGpu) return "all";
  std::string devices = "device=";
  for (std::size_t i = 0; i < entries.size(); ++i) devices += (i ? "," : "") + entries[i].uuid;
  // docker splits the value as CSV: several devices need the inner quotes.
  return entries.size() > 1 ? "\"" + devices + "\"" : devices;
}

std::vector<std::string> docker_args(const std::string& folder, const CreateOptions& o,
                                     const std::string& library, const std::string& preload,
                                     const std::vector<Entry>& entries) {
  const std::string dir = o.container_run_dir;
  std::vector<std::string> args = {
      "-v", folder + ":" + dir,
      "-v", folder + "/" + kLimitsName + ":" + dir + "/" + kLimitsName + ":ro",
      "-e", "CUSHARE_RUN_DIR=" + dir,
      "-v", library + ":" + kContainerLibrary + ":ro",
  };
  if (o.preload == "env") {
    args.insert(args.end(), {"-e", std::string("LD_PRELOAD=") + kContainerLibrary});
  } else {
    args.insert(args.end(), {"-v", preload + ":/etc/ld.so.preload:ro"});
  }
  args.insert(args.end(), {"--gpus", gpus_flag(entries)});
  return args;
}

// `word` as one shell word: quoted when it holds characters the shell treats
// specially (the quoted --gpus value), as is otherwise.
std::string shell_word(const std::string& word) {
  if (word.find_first_of("\"' $`\\;&|<>()*?[]{}!#~") == std::string::npos) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

int run_create(const GlobalOptions& global, const CreateOptions& options) {
  if (auto error = check_allocation_id(options.alloc)) throw CliError(kExitUsage, *error);
  if (options.preload != "file" && options.preload != "env")
    throw CliError(kExitUsage, "--preload must be file or env");
  if (auto error = check_container_dir(options.container_run_dir, "--container-run-dir"))
    throw CliError(kExitUsage, *error);
  const std::vector<Entry> entries = plan_entries(options);

  std::error_code ec;
  if (fs::exists(global.run_dir, ec) && detect_run_dir(global.run_dir) == RunDirKind::kAllocation)
    throw CliError(
        kExitFailure,
        global.run_dir +
            " is an allocation's folder, not a node run dir: pass --run-dir of the node");
  const fs::path folder = allocation_dir(global.run_dir, options.alloc);
  if (fs::exists(folder, ec))
    throw CliError(kExitFailure, "allocation '" + options.alloc + "' already exists (" +
                                     folder.string() +
                                     "): change it with `cusharectl set` or remove it first");
  fs::create_directories(folder, ec);
  if (ec)
    throw CliError(kExitFailure,
                   "cannot create " + folder.string() + ": " + ec.message() + " (run as root?)");
  // Containers reach their folder through its bind mount only: alloc/ is the
  // node's alone (no other local user can open any tenant's usage), and the
  // folder only needs to be searchable by the container's processes, whatever
  // their uid, to open usage (0666) by name.
  ::chmod((fs::path(global.run_dir) / kAllocDirName).c_str(), kAllocRootMode);
  ::chmod(folder.c_str(), kAllocFolderMode);

  const std::string library = library_path(options.library);
  try {
    shm::RegionCreateOptions create{options.alloc, kCreatedByCtl};
    shm::LimitsMapping::create(folder / kLimitsName, create, [&](shm::LimitsRegion& region) {
      for (unsigned i = 0; i < entries.size(); ++i)
        shm::init_gpu_entry(region, i, entries[i].uuid, entries[i].limits);
    });
    shm::UsageMapping::create(folder / kUsageName, create, [&](shm::UsageRegion& region) {
      region.gpu_count.store(static_cast<std::uint32_t>(entries.size()), std::memory_order_relaxed);
    });
  } catch (const shm::RegionError& e) {
    fs::remove_all(folder, ec);
    throw CliError(kExitFailure, region_error_message(e));
  }
  const fs::path preload = preload_file(global.run_dir);
  if (options.preload == "file") write_preload(preload);

  const std::vector<std::string> args =
      docker_args(folder.string(), options, library, preload.string(), entries);
  if (global.json()) {
    std::cout << nlohmann::json{{"alloc", options.alloc},
                                {"folder", folder.string()},
                                {"library", library},
                                {"docker_args", args}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << "created allocation " << options.alloc << " in " << folder.string() << "\n";
    if (!fs::exists(library, ec))
      std::cout
          << "note: " << library
          << " does not exist on this host yet: install libcushare.so there or pass --library\n";
    std::cout << "attach a container with:\n  docker run";
    for (std::size_t i = 0; i < args.size(); i += 2)
      std::cout << " \\\n    " << args[i] << " " << shell_word(args[i + 1]);
    std::cout << " IMAGE [COMMAND]\n";
  }
  return kExitOk;
}

int run_remove(const GlobalOptions& global, const RemoveOptions& options) {
  if (auto error = check_allocation_id(options.alloc)) throw CliError(kExitUsage, *error);
  if (detect_run_dir(global.run_dir) != RunDirKind::kNode)
    throw CliError(kExitFailure, global.run_dir + " is an allocation's folder, not a node run dir");
  const fs::path folder = allocation_dir(global.run_dir, options.alloc);
  std::error_code ec;
  if (!fs::is_directory(folder, ec))
    throw CliError(kExitFailure, "no allocation '" + options.alloc + "' in " + global.run_dir +
                                     ": see `cusharectl status`");
  if (!fs::exists(folder / kLimitsName, ec))
    throw CliError(kExitFailure,
                   folder.string() + " has no limits file: not an allocation, left alone");
  if (!options.force) {
    const Allocation alloc = read_allocation(global.run_dir, options.alloc, read_clocks());
    if (!alloc.processes.empty())
      throw CliError(kExitFailure, "allocation '" + options.alloc + "' still has " +
                                       std::to_string(alloc.processes.size()) +
                                       " process(es) (pid " +
                                       std::to_string(alloc.processes.front().pid) +
                                       "...): stop its containers first, or pass --force");
  }
  fs::remove_all(folder, ec);
  if (ec) throw CliError(kExitFailure, "cannot remove " + folder.string() + ": " + ec.message());
  if (!global.json()) std::cout << "removed allocation " << options.alloc << "\n";
  return kExitOk;
}

}  // namespace cushare::tools
