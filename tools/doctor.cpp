#include "tools/doctor.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "node/run_dir.hpp"
#include "tools/control_client.hpp"
#include "tools/table.hpp"

namespace cushare::tools {

namespace fs = std::filesystem;

namespace {

// Runs `probe` in a child; returns (exit status 0?, what it wrote). A child
// that crashes or runs past `timeout_s` counts as failure.
std::pair<bool, std::string> in_child(const std::function<int(int)>& probe, int timeout_s = 10) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return {false, std::string("pipe: ") + std::strerror(errno)};
  const pid_t pid = ::fork();
  if (pid < 0) return {false, std::string("fork: ") + std::strerror(errno)};
  if (pid == 0) {
    ::close(pipe_fds[0]);
    ::alarm(static_cast<unsigned>(timeout_s));
    ::_exit(probe(pipe_fds[1]));
  }
  ::close(pipe_fds[1]);
  std::string out;
  std::array<char, 512> buf{};
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buf.data(), buf.size())) > 0)
    out.append(buf.data(), static_cast<std::size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status))
    return {false, out.empty()
                       ? "the probe was killed by signal " + std::to_string(WTERMSIG(status))
                       : out};
  return {WIFEXITED(status) && WEXITSTATUS(status) == 0, out};
}

void write_all(int fd, const std::string& text) {
  [[maybe_unused]] const ssize_t n = ::write(fd, text.data(), text.size());
}

Check make(std::string name, Verdict v, std::string detail, std::string fix = {}) {
  return Check{std::move(name), v, std::move(detail), std::move(fix)};
}

}  // namespace

Check check_library(const std::string& library) {
  std::error_code ec;
  if (!fs::exists(library, ec))
    return make(
        "library", Verdict::kFail, library + " does not exist",
        "install libcushare.so there (the device plugin's DaemonSet does), or pass --library PATH");
  const auto [ok, out] = in_child([&](int fd) {
    void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      write_all(fd, ::dlerror());
      return 1;
    }
    const bool exports =
        ::dlsym(handle, "cuMemAlloc_v2") != nullptr && ::dlsym(handle, "cuLaunchKernel") != nullptr;
    if (!exports)
      write_all(fd, "loads but does not export cuMemAlloc_v2/cuLaunchKernel: not libcushare.so?");
    return exports ? 0 : 1;
  });
  if (!ok)
    return make("library", Verdict::kFail, library + " does not load: " + out,
                "reinstall libcushare.so built for this system (check `ldd " + library + "`)");
  return make("library", Verdict::kOk, library + " loads and exports the CUDA entry points");
}

Check check_ld_so_preload(const std::string& path, bool inside_container) {
  std::ifstream in(path);
  std::vector<std::string> entries;
  std::string word;
  while (in >> word)
    if (word[0] != '#') entries.push_back(word);
  const auto missing = std::find_if(entries.begin(), entries.end(), [](const std::string& e) {
    std::error_code ec;
    return !fs::exists(e, ec);
  });
  if (missing != entries.end())
    return make("ld.so.preload", Verdict::kFail,
                path + " names " + *missing + ", which does not exist",
                "fix or remove the line in " + path + " (every program prints a loader error)");
  std::string cushare;
  for (const auto& e : entries)
    if (e.find("libcushare") != std::string::npos) cushare = e;
  const char* env = std::getenv("LD_PRELOAD");
  const bool env_preload = env != nullptr && std::strstr(env, "libcushare") != nullptr;
  if (!cushare.empty()) {
    if (!inside_container)
      return make("ld.so.preload", Verdict::kWarn,
                  path + " preloads " + cushare + " into every host process",
                  "on a host, preload only inside containers (device plugin mount or LD_PRELOAD)");
    return make("ld.so.preload", Verdict::kOk, path + " preloads " + cushare);
  }
  if (inside_container && !env_preload)
    return make("ld.so.preload", Verdict::kFail,
                "neither " + path + " nor LD_PRELOAD loads libcushare.so here",
                "mount an ld.so.preload naming the library at /etc/ld.so.preload, or set "
                "LD_PRELOAD (see `cusharectl create`)");
  return make("ld.so.preload", Verdict::kOk,
              env_preload ? std::string("LD_PRELOAD loads libcushare.so")
                          : path + (entries.empty() ? " is empty or absent (right for a host)"
                                                    : " does not name libcushare.so"));
}

Check check_driver() {
  const auto [ok, out] = in_child([](int fd) {
    void* cuda = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (cuda == nullptr) {
      write_all(fd, std::string("libcuda.so.1 not found: ") + ::dlerror());
      return 1;
    }
    using InitFn = int (*)(unsigned);
    using VersionFn = int (*)(int*);
    using CountFn = int (*)(int*);
    const auto init = reinterpret_cast<InitFn>(::dlsym(cuda, "cuInit"));
    const auto version = reinterpret_cast<VersionFn>(::dlsym(cuda, "cuDriverGetVersion"));
    const auto count = reinterpret_cast<CountFn>(::dlsym(cuda, "cuDeviceGetCount"));
    if (init == nullptr) {
      write_all(fd, "libcuda.so.1 has no cuInit");
      return 1;
    }
    const int rc = init(0);
    if (rc != 0) {
      write_all(fd, "cuInit failed with CUresult " + std::to_string(rc));
      return 1;
    }
    int v = 0, n = 0;
    if (version) version(&v);
    if (count) count(&n);
    write_all(fd, "driver API " + std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10) +
                      ", " + std::to_string(n) + " GPU(s)");
    return 0;
  });
  if (!ok)
    return make(
        "driver", Verdict::kFail, out,
        "install the NVIDIA driver and check access to /dev/nvidia* (in a container: --gpus all)");
  return make("driver", Verdict::kOk, "libcuda.so.1 initialises: " + out);
}

Check check_daemon(const std::string& run_dir, bool inside_container) {
  if (inside_container) {
    try {
      AllocationFiles files = open_allocation(run_dir);
      const DaemonState d = daemon_from_regions({files.views()}, read_clocks());
      if (d.up)
        return make(
            "daemon", Verdict::kOk,
            "cushared ticks this allocation (pid " + std::to_string(d.pid.value_or(0)) + ")");
      return make("daemon", Verdict::kWarn, "no recent cushared heartbeat in this allocation",
                  "standalone use works (local duty-cycle limiting); for shared GPUs run cushared "
                  "on the node");
    } catch (const std::exception& e) {
      return make("daemon", Verdict::kFail, e.what(), "check the allocation folder mount");
    }
  }
  try {
    const nlohmann::json pong =
        control_call(socket_path(run_dir), {{"cmd", "ping"}}, std::chrono::seconds(3));
    return make("daemon", Verdict::kOk,
                "cushared answers on " + socket_path(run_dir) + " (pid " +
                    std::to_string(pong.value("pid", 0)) + ")");
  } catch (const std::exception& e) {
    return make("daemon", Verdict::kWarn, e.what(),
                "start cushared (`systemctl start cushared`): without it GPU time is only limited "
                "locally per container");
  }
}

Check check_regions(const std::string& run_dir) {
  try {
    const Status s = read_status_from_regions(run_dir, {}, read_clocks());
    if (!s.problems.empty()) {
      std::string detail =
          std::to_string(s.problems.size()) + " unreadable: " + s.problems.front().error;
      return make("regions", Verdict::kFail, detail,
                  "remove the allocation (`cusharectl remove ID --force`) and recreate it with "
                  "matching versions");
    }
    return make("regions", Verdict::kOk,
                std::to_string(s.allocations.size()) + " allocation(s), layout version " +
                    std::to_string(shm::kLayoutVersion));
  } catch (const std::exception& e) {
    return make("regions", Verdict::kFail, e.what(),
                "create the run dir (cushared or `cusharectl create` does)");
  }
}

Check check_permissions(const std::string& run_dir, bool inside_container) {
  struct stat st {};
  if (::stat(run_dir.c_str(), &st) != 0)
    return make("permissions", Verdict::kFail, run_dir + " does not exist",
                "create it: `install -d -m 0755 " + run_dir + "`");
  std::vector<std::string> problems;
  if (inside_container) {
    const std::string limits = run_dir + "/" + kLimitsName;
    if (::access(limits.c_str(), W_OK) == 0)
      problems.push_back(
          limits +
          " is writable here: a tenant could raise its own quota; mount it read-only (:ro)");
    const std::string usage = run_dir + "/" + kUsageName;
    if (fs::exists(usage) && ::access(usage.c_str(), W_OK) != 0)
      problems.push_back(
          usage + " is not writable here: the shim cannot account; mount the folder read-write");
  } else {
    if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0)
      problems.push_back(run_dir + " is world-writable: `chmod 0755 " + run_dir + "`");
    for (const auto& id : list_allocation_ids(run_dir)) {
      const std::string folder = allocation_dir(run_dir, id);
      struct stat ls {};
      if (::stat((folder + "/" + kLimitsName).c_str(), &ls) == 0 &&
          (ls.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        problems.push_back(folder + "/limits is group/world-writable: `chmod 0644` it");
      struct stat us {};
      if (::stat((folder + "/" + kUsageName).c_str(), &us) == 0 && (us.st_mode & 0666) != 0666)
        problems.push_back(folder +
                           "/usage is not 0666: containers running as other users cannot account");
    }
  }
  if (problems.empty())
    return make("permissions", Verdict::kOk, run_dir + " and its regions have safe modes");
  std::string detail = problems.front();
  if (problems.size() > 1) detail += " (+" + std::to_string(problems.size() - 1) + " more)";
  return make("permissions", Verdict::kFail, detail,
              "fix the mode as shown; `cusharectl doctor` again");
}

std::vector<Check> run_checks(const DoctorInputs& in) {
  bool inside = false;
  try {
    inside = detect_run_dir(in.run_dir) == RunDirKind::kAllocation;
  } catch (const std::exception&) {
  }
  return {check_library(in.library),
          check_ld_so_preload(in.ld_so_preload, inside),
          check_driver(),
          check_daemon(in.run_dir, inside),
          check_regions(in.run_dir),
          check_permissions(in.run_dir, inside)};
}

std::string render_checks(const std::vector<Check>& checks) {
  std::string out;
  std::size_t fails = 0, warns = 0;
  for (const auto& c : checks) {
    const char* tag = c.verdict == Verdict::kOk     ? "[ ok ] "
                      : c.verdict == Verdict::kWarn ? "[warn] "
                                                    : "[FAIL] ";
    std::string name = c.name;
    name.resize(14, ' ');
    out += wrap(tag + name + c.detail, 80, 21);
    if (!c.fix.empty()) out += wrap("       fix: " + c.fix, 80, 12);
    fails += c.verdict == Verdict::kFail;
    warns += c.verdict == Verdict::kWarn;
  }
  out += fails == 0 ? (warns == 0 ? "verdict: all checks passed\n"
                                  : "verdict: usable, " + std::to_string(warns) + " warning(s)\n")
                    : "verdict: " + std::to_string(fails) + " check(s) failed\n";
  return out;
}

nlohmann::json to_json(const std::vector<Check>& checks) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& c : checks)
    list.push_back({{"name", c.name},
                    {"verdict", c.verdict == Verdict::kOk     ? "ok"
                                : c.verdict == Verdict::kWarn ? "warn"
                                                              : "fail"},
                    {"detail", c.detail},
                    {"fix", c.fix.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.fix)}});
  return {{"ok", all_passed(checks)}, {"checks", list}};
}

bool all_passed(const std::vector<Check>& checks) {
  for (const auto& c : checks)
    if (c.verdict == Verdict::kFail) return false;
  return true;
}

}  // namespace cushare::tools
