// Who a process is, in a form that survives PID reuse and PID namespaces:
// (pid, PID-namespace inode, start time). The parsing of /proc/<pid>/stat is a
// pure function; the readers around it do the file I/O.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "shm/parsed.hpp"

namespace cushare::shm {

struct ProcStat {
  char state = '?';              // field 3: R S D Z T t X I ...
  std::uint64_t start_time = 0;  // field 22: clock ticks after boot
};

// Parses one /proc/<pid>/stat line. The command name (field 2) may contain
// spaces and parentheses, so fields are counted after the LAST ')'.
Parsed<ProcStat> parse_proc_stat(std::string_view line);

// Reads <proc_root>/<pid>/stat; nullopt when the process does not exist (or
// the file cannot be read or parsed: callers treat that as "gone").
std::optional<ProcStat> read_proc_stat(pid_t pid, const std::string& proc_root = "/proc");

// st_ino of <proc_root>/<pid>/ns/pid (the PID namespace the process lives
// in); nullopt when it cannot be read.
std::optional<std::uint64_t> read_pidns_inode(pid_t pid, const std::string& proc_root = "/proc");

struct ProcessIdentity {
  std::uint32_t pid = 0;          // in its own PID namespace
  std::uint64_t pidns_inode = 0;  // st_ino of /proc/self/ns/pid
  std::uint64_t start_time = 0;   // /proc/self/stat field 22
};

// The calling process's identity (getpid(), /proc/self/ns/pid, /proc/self/stat).
Parsed<ProcessIdentity> self_identity(const std::string& proc_root = "/proc");

}  // namespace cushare::shm
