// The node run dir on disk, one definition for every component:
//
//   RUN/                    the node's (root, 0755): the daemon's socket, the preload file
//   RUN/cushared.sock       the daemon's control socket
//   RUN/cushared.lock       flock-held by the running daemon: one cushared per run dir
//   RUN/ld.so.preload       names the library's path inside containers; mounted read-only
//                           at /etc/ld.so.preload (never inside an allocation's folder,
//                           which its containers can write)
//   RUN/alloc/              the allocations (0700: only node processes go through it;
//                           containers reach their own folder through its bind mount)
//   RUN/alloc/<id>/         one allocation (0711: its processes, of any uid, open its
//                           files by name but cannot list or create)
//   RUN/alloc/<id>/limits   the quota (0644), mounted read-only over the folder's mount
//   RUN/alloc/<id>/usage    written by its processes (0666)
#pragma once

namespace cushare::shm {

inline constexpr char kDefaultNodeRunDir[] = "/var/run/cushare";
inline constexpr char kSocketName[] = "cushared.sock";
inline constexpr char kDaemonLockName[] = "cushared.lock";
inline constexpr char kPreloadName[] = "ld.so.preload";
inline constexpr char kAllocDirName[] = "alloc";
inline constexpr char kLimitsName[] = "limits";
inline constexpr char kUsageName[] = "usage";

inline constexpr unsigned kAllocRootMode = 0700;
inline constexpr unsigned kAllocFolderMode = 0711;

}  // namespace cushare::shm
