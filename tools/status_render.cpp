#include "tools/status_render.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "node/format.hpp"
#include "tools/table.hpp"

namespace cushare::tools {

namespace {

std::string plural(std::size_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// Shares in the overview table: whole percent keeps the column narrow.
std::string short_ppm(std::optional<std::uint32_t> ppm) {
  if (!ppm) return "-";
  return std::to_string((static_cast<std::uint64_t>(*ppm) + 5'000) / 10'000) + "%";
}

std::string daemon_state(const DaemonState& d) {
  if (!d.up) return "down (share figures unavailable)";
  std::string s = "up";
  std::vector<std::string> parts;
  if (d.pid) parts.push_back("pid " + std::to_string(*d.pid));
  if (d.quantum_ns && *d.quantum_ns != 0)
    parts.push_back("quantum " + format_duration_ns(*d.quantum_ns));
  if (!parts.empty()) {
    s += " (";
    for (std::size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
    s += ")";
  }
  return s;
}

std::string daemon_line(const DaemonState& d) {
  return "daemon " + daemon_state(d);
}

std::string gpu_heading(const std::string& uuid, const std::vector<GpuInfo>& gpus,
                        std::size_t width) {
  std::string line;
  if (uuid == shm::kAnyGpu) {
    line = "Every GPU (limits not tied to a UUID)";
  } else if (const GpuInfo* info = find_gpu(gpus, uuid)) {
    line = "GPU " + std::to_string(info->index);
    if (!info->name.empty()) line += "  " + info->name;
    if (info->memory_total_bytes) line += "  " + format_bytes(*info->memory_total_bytes);
    line += "  " + uuid;
  } else {
    line = "GPU " + uuid;
  }
  return fit(line, width);
}

// GPU UUIDs in display order: known GPUs by index, then unknown UUIDs, then "*".
std::vector<std::string> gpu_order(const Status& status) {
  std::vector<std::string> order;
  auto add = [&](const std::string& uuid) {
    if (std::find(order.begin(), order.end(), uuid) == order.end()) order.push_back(uuid);
  };
  std::vector<GpuInfo> known = status.gpus;
  std::sort(known.begin(), known.end(),
            [](const auto& a, const auto& b) { return a.index < b.index; });
  for (const auto& g : known) add(g.uuid);
  std::vector<std::string> unknown;
  for (const auto& a : status.allocations)
    for (const auto& g : a.gpus)
      if (g.uuid != shm::kAnyGpu && !find_gpu(status.gpus, g.uuid)) unknown.push_back(g.uuid);
  std::sort(unknown.begin(), unknown.end());
  for (const auto& u : unknown) add(u);
  for (const auto& a : status.allocations)
    for (const auto& g : a.gpus)
      if (g.uuid == shm::kAnyGpu) add(g.uuid);
  return order;
}

// Two lines: where (may be a long path, wrapped) and what state.
std::string title(const Status& status, std::size_t width) {
  if (status.kind == RunDirKind::kAllocation) {
    const std::string id = status.allocations.empty() ? "?" : status.allocations.front().id;
    return wrap("allocation " + id + " in " + status.run_dir, width, 2) +
           fit(daemon_line(status.daemon), width) + "\n";
  }
  return wrap("node " + status.run_dir, width, 2) +
         fit(plural(status.allocations.size(), "allocation") + ", " + daemon_line(status.daemon),
             width) +
         "\n";
}

std::string problems_block(const Status& status, std::size_t width) {
  std::string out;
  for (const auto& p : status.problems)
    out += wrap("! " + (p.alloc.empty() ? p.path : p.alloc) + ": " + p.error, width, 4);
  return out;
}

}  // namespace

std::string render_status(const Status& status, std::size_t width) {
  std::string out = title(status, width);
  if (status.allocations.empty() && status.problems.empty()) {
    out +=
        "\nno allocations yet (create one with `cusharectl create` or through the device plugin)\n";
  }
  for (const auto& uuid : gpu_order(status)) {
    Table table({{"ALLOCATION", Align::kLeft, true, 8},
                 {"USED/QUOTA", Align::kRight},
                 {"OVHD", Align::kRight},
                 {"COMPUTE", Align::kLeft},
                 {"WGT", Align::kRight},
                 {"SHARE/GOT", Align::kRight},
                 {"THROTTLED", Align::kRight},
                 {"PROCS", Align::kRight}});
    for (const auto& a : status.allocations) {
      for (const auto& g : a.gpus) {
        if (g.uuid != uuid) continue;
        table.add_row({a.id, format_bytes(g.used_bytes) + "/" + format_quota(g.memory_limit_bytes),
                       format_bytes(g.overhead_bytes),
                       g.mode + " " + std::to_string(g.compute_limit_pct) + "%",
                       std::to_string(g.weight),
                       short_ppm(g.share_target_ppm) + "/" + short_ppm(g.share_achieved_ppm),
                       format_duration_ns(g.throttled_ns), std::to_string(g.processes)});
      }
    }
    out += "\n" + gpu_heading(uuid, status.gpus, width) + "\n";
    if (table.rows() == 0) {
      out += "  (idle: no allocation)\n";
    } else {
      out += table.render(width, 2);
    }
  }
  if (!status.problems.empty()) out += "\n" + problems_block(status, width);
  return out;
}

std::string render_allocation(const Allocation& alloc, const std::vector<GpuInfo>& gpus,
                              const DaemonState& daemon, std::size_t width) {
  std::string out;
  // "  label       value", long values wrapped under the value column.
  auto line = [&](const std::string& label, const std::string& value) {
    constexpr std::size_t kValueColumn = 14;
    std::string text = "  " + label;
    text.resize(std::max<std::size_t>(text.size() + 1, kValueColumn), ' ');
    const std::string wrapped = wrap(value, width > kValueColumn ? width - kValueColumn : 1, 0);
    std::size_t start = 0;
    while (start < wrapped.size()) {
      const std::size_t end = wrapped.find('\n', start);
      out += (start == 0 ? text : std::string(kValueColumn, ' ')) +
             wrapped.substr(start, end - start) + "\n";
      start = end + 1;
    }
  };
  out += fit("allocation " + alloc.id, width) + "\n";
  line("folder", alloc.path);
  line("created", format_unix_time(alloc.created_unix_ns) + " by " + alloc.created_by);
  line("daemon", daemon_state(daemon));
  if (!alloc.has_usage) line("usage", "no usage region yet (no process has started here)");

  for (std::size_t i = 0; i < alloc.gpus.size(); ++i) {
    const AllocationGpu& g = alloc.gpus[i];
    out += "\n" + gpu_heading(g.uuid, gpus, width) + "\n";
    std::string memory = format_bytes(g.used_bytes) + " used of " +
                         format_quota(g.memory_limit_bytes) + " quota (tracked " +
                         format_bytes(g.tracked_bytes) + ", overhead " +
                         format_bytes(g.overhead_bytes) + ")";
    if (g.memory_limit_bytes && *g.memory_limit_bytes > 0) {
      const auto pct = static_cast<unsigned>(std::llround(
          100.0 * static_cast<double>(g.used_bytes) / static_cast<double>(*g.memory_limit_bytes)));
      memory += ", " + std::to_string(pct) + "%";
    }
    line("memory", memory);
    line("compute", g.mode + ", limit " + std::to_string(g.compute_limit_pct) + "%, weight " +
                        std::to_string(g.weight));
    line("share", "entitled " + format_ppm(g.share_target_ppm) + ", achieved " +
                      format_ppm(g.share_achieved_ppm) + " (last 10 s)");
    line("lease", std::string(g.lease_held ? "held" : "not held") + ", " +
                      std::to_string(g.lease_grants) + " grants, " +
                      format_duration_ns(g.granted_ns) + " granted, " + std::to_string(g.handoffs) +
                      " handoffs, busy " + format_duration_ns(g.busy_ns));
    line("launches", std::to_string(g.launches) + " (" + std::to_string(g.throttled_launches) +
                         " throttled, " + format_duration_ns(g.throttled_ns) +
                         " waiting), demand " + std::to_string(g.demand) + ", busy processes " +
                         std::to_string(g.busy_processes));
    std::string oom = std::to_string(g.oom_refusals) + " refusals";
    if (g.oom_refusals > 0)
      oom += "; last " + format_bytes(g.last_oom_request_bytes) + " requested at " +
             format_unix_time(g.last_oom_unix_ns);
    line("oom", oom);
    line("backstop", std::to_string(g.over_quota_kills) + " killed on ground truth, " +
                         format_duration_ns(g.unleased_busy_ns) + " GPU time beyond leases");
  }

  out += "\nprocesses\n";
  if (alloc.processes.empty()) {
    out += "  (none)\n";
    return out;
  }
  Table table({{"SLOT", Align::kRight},
               {"PID", Align::kRight},
               {"HOST PID", Align::kRight},
               {"GPU", Align::kLeft, true, 3},
               {"TRACKED", Align::kRight},
               {"OVERHEAD", Align::kRight},
               {"HEARTBEAT", Align::kRight}});
  for (const auto& p : alloc.processes) {
    for (std::size_t i = 0; i < alloc.gpus.size(); ++i) {
      const bool first = i == 0;
      const GpuInfo* info = find_gpu(gpus, alloc.gpus[i].uuid);
      const std::string gpu = info ? std::to_string(info->index) : alloc.gpus[i].uuid;
      table.add_row(
          {first ? std::to_string(p.slot) : "", first ? std::to_string(p.pid) : "",
           first ? (p.host_pid ? std::to_string(p.host_pid) : std::string("-")) : "", gpu,
           format_bytes(i < p.tracked_bytes.size() ? p.tracked_bytes[i] : 0),
           format_bytes(i < p.overhead_bytes.size() ? p.overhead_bytes[i] : 0),
           first ? (p.heartbeat_age_ns ? format_duration_ns(*p.heartbeat_age_ns) + " ago" : "-")
                 : ""});
    }
  }
  out += table.render(width, 2);
  return out;
}

std::string share_bar(std::optional<std::uint32_t> achieved_ppm,
                      std::optional<std::uint32_t> target_ppm, std::size_t width) {
  if (width < 3) return std::string(width, ' ');
  const std::size_t inner = width - 2;
  auto cells = [&](std::uint32_t ppm) {
    return static_cast<std::size_t>(
        std::llround(static_cast<double>(std::min<std::uint32_t>(ppm, 1'000'000)) *
                     static_cast<double>(inner) / 1e6));
  };
  std::string bar(inner, '.');
  if (achieved_ppm) std::fill_n(bar.begin(), cells(*achieved_ppm), '#');
  if (target_ppm) bar[std::min(cells(*target_ppm), inner - 1)] = '|';
  return "[" + bar + "]";
}

std::string render_top(const Status& status, std::size_t width) {
  std::string out = title(status, width);
  out += fit("bars: # achieved share (last 10 s), | entitlement.  q or Ctrl-C quits", width) + "\n";
  for (const auto& uuid : gpu_order(status)) {
    out += "\n" + gpu_heading(uuid, status.gpus, width) + "\n";
    // Fixed columns around a bar that takes what is left of the width.
    constexpr std::size_t kIdWidth = 14, kFigures = 34;
    const std::size_t bar_width =
        width > 2 + kIdWidth + 1 + kFigures + 14 ? width - (2 + kIdWidth + 1 + 2 + kFigures) : 12;
    bool any = false;
    for (const auto& a : status.allocations) {
      for (const auto& g : a.gpus) {
        if (g.uuid != uuid) continue;
        any = true;
        std::string id = fit(a.id, kIdWidth);
        id.resize(kIdWidth + 1, ' ');
        std::string figures = format_ppm(g.share_achieved_ppm) + " of " +
                              format_ppm(g.share_target_ppm) + " " + g.mode + "  " +
                              format_bytes(g.used_bytes) + "/" + format_quota(g.memory_limit_bytes);
        std::string line = "  " + id;
        line += share_bar(g.share_achieved_ppm, g.share_target_ppm, bar_width);
        line += "  ";
        line += figures;
        out += fit(line, width);
        out += '\n';
      }
    }
    if (!any) out += "  (idle: no allocation)\n";
  }
  if (!status.problems.empty()) out += "\n" + problems_block(status, width);
  return out;
}

}  // namespace cushare::tools
