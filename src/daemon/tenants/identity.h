// Who a process is, as the host sees it (DESIGN.md section 4, "Registry"):
// the daemon identifies a registering tenant itself, from its host pid
// (SO_PEERCRED), by reading /proc/<pid>/status (NSpid: the pid inside the
// process's own pid namespace; Uid), /proc/<pid>/stat (start time, which with
// the pid names one process for its whole life) and /proc/<pid>/cgroup (the
// Kubernetes pod UID and the container id, for cgroup v1 and v2 and the
// kubelet's systemd and cgroupfs drivers with containerd, CRI-O and Docker).
//
// What a client says about itself (POD_NAME, POD_NAMESPACE, CONTAINER_NAME,
// a pod UID) is a hint: CheckHints compares it with what the host says and
// names every contradiction; it never replaces what the host says.
//
// The proc root is a parameter so that tests use a fake /proc tree.
// Pure functions of the files they read; thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuslice::daemon {

// What a process's cgroup path says about it.
struct CgroupInfo {
  std::string path;          // the cgroup v2 path, or the v1 path the pod was found in
  std::string pod_uid;       // lower case with dashes ("8d5f…-…"); empty: not in a pod
  std::string container_id;  // lower-case hex; empty: not in a container, or not recognised
  std::string runtime;       // "containerd", "cri-o", "docker", or "" (unknown / none)
  std::string qos;           // "guaranteed", "burstable", "besteffort"; "" outside a pod
  // The cgroup v2 ("0::") line's path whatever `path` is; "" when the process
  // has none (cgroup v1 only). The driver's memory limits name this one.
  std::string unified_path;

  bool operator==(const CgroupInfo&) const = default;
};

// One cgroup path, e.g.
//  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_>.slice/
//      cri-containerd-<id>.scope                      (systemd driver; crio-, docker- too)
//  /kubepods/burstable/pod<uid>/<id>                  (cgroupfs driver)
//  /system.slice/docker-<id>.scope, /docker/<id>      (a container, no pod)
//  /user.slice/user-1000.slice/session-3.scope        (plain: nothing found)
CgroupInfo ParseCgroupPath(std::string_view path);

// The text of /proc/<pid>/cgroup ("<id>:<controllers>:<path>" lines). The
// unified (v2, "0::") line wins when it names a pod or container; otherwise
// the first v1 line that does; otherwise the v2 (or first) line's path alone.
CgroupInfo ParseCgroupFile(std::string_view text);

struct ProcessIdentity {
  pid_t host_pid = 0;
  pid_t container_pid = 0;  // last NSpid entry: the pid in the innermost namespace
  uid_t uid = 0;            // effective uid (second Uid field)
  uint64_t start_time = 0;  // clock ticks since boot (field 22 of stat)
  CgroupInfo cgroup;
  // POD_NAME, POD_NAMESPACE, CONTAINER_NAME as the process's initial
  // environment holds them (absent when unset or unreadable).
  std::map<std::string, std::string> environment;
};

// Reads `proc_root`/<pid>/{status,stat,cgroup,environ}. kNotFound when the
// process does not exist (or exited while being read); kInternal naming the
// file for one that cannot be parsed. environ is optional (root reads it).
StatusOr<ProcessIdentity> IdentifyProcess(const std::string& proc_root, pid_t pid);

// Field 22 of `proc_root`/<pid>/stat; 0 when the process does not exist.
uint64_t ReadStartTime(const std::string& proc_root, pid_t pid);

// What a client claims about itself; empty fields are not claimed.
struct ClaimedHints {
  std::string pod_name;
  std::string pod_namespace;
  std::string container_name;
  std::string pod_uid;
};

// Every contradiction between `claimed` and `identity`, one message each,
// naming the field ("pod_uid: claimed X, but the process's cgroup is pod Y").
// Checked: the pod UID against the cgroup; any pod field claimed by a process
// in no pod's cgroup; each hint against the process's initial environment.
std::vector<std::string> CheckHints(const ProcessIdentity& identity, const ClaimedHints& claimed);

// The hints as the daemon shows them (a tenant's pod, namespace and
// container): a name only where the process is in a pod and its initial
// environment does not contradict it; the claimed pod UID as claimed (it is
// shown as a claim). A process in no pod shows no pod and no container,
// whatever it claims (CheckHints names the claims).
ClaimedHints ShownHints(const ProcessIdentity& identity, const ClaimedHints& claimed);

}  // namespace gpuslice::daemon
