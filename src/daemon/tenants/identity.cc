#include "daemon/tenants/identity.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>

namespace gpuslice::daemon {
namespace {

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool IsHex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) != 0;
  });
}

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  return out;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A pod UID as the kubelet writes it in a cgroup name: 8-4-4-4-12 hex with
// '-' (cgroupfs) or '_' (systemd), or 32 hex (static pods' config hash).
// Returns the canonical form (lower case, dashes), or "" if `s` is not one.
std::string CanonicalPodUid(std::string_view s) {
  if (s.size() == 32 && IsHex(s)) return Lower(s);
  if (s.size() != 36) return "";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool dash_position = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_position) {
      if (s[i] != '-' && s[i] != '_') return "";
      out += '-';
    } else {
      if (std::isxdigit(static_cast<unsigned char>(s[i])) == 0) return "";
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    }
  }
  return out;
}

// "kubepods-burstable-pod<uid>.slice" or "pod<uid>": the canonical UID or "".
std::string PodUidOfSegment(std::string_view segment) {
  if (EndsWith(segment, ".slice")) segment.remove_suffix(6);
  size_t at = std::string_view::npos;
  if (segment.starts_with("pod")) {
    at = 3;
  } else if (size_t p = segment.rfind("-pod"); p != std::string_view::npos) {
    at = p + 4;
  }
  if (at == std::string_view::npos) return "";
  return CanonicalPodUid(segment.substr(at));
}

std::string QosOfSegment(std::string_view segment) {
  if (EndsWith(segment, ".slice")) segment.remove_suffix(6);
  for (std::string_view qos : {"burstable", "besteffort"}) {
    if (segment == qos || segment == "kubepods-" + std::string(qos)) return std::string(qos);
  }
  return "";
}

// A container's own cgroup: "<prefix><id>.scope" of a known runtime,
// podman's "libpod-<id>" under the cgroupfs manager, or a bare id where a
// runtime puts one: inside a pod's cgroup (the kubelet's
// cgroupfs driver) or under /docker. Any other hex name (a host's own
// cgroup, e.g. /process_api/<hash>) names no container. Sets id and runtime
// on success.
bool ContainerOfSegment(std::string_view segment, std::string_view parent, bool in_pod,
                        CgroupInfo& info) {
  struct Prefix {
    std::string_view prefix;
    const char* runtime;
  };
  static constexpr Prefix kScopes[] = {
      {"cri-containerd-", "containerd"}, {"crio-", "cri-o"},    {"docker-", "docker"},
      {"cri-dockerd-", "docker"},        {"libpod-", "podman"},
  };
  if (EndsWith(segment, ".scope")) {
    std::string_view name = segment.substr(0, segment.size() - 6);
    for (const Prefix& p : kScopes) {
      if (!name.starts_with(p.prefix)) continue;
      std::string_view id = name.substr(p.prefix.size());
      if (id.size() < 12 || !IsHex(id)) return false;  // e.g. crio-conmon-<id>: the monitor
      info.container_id = Lower(id);
      info.runtime = p.runtime;
      return true;
    }
    return false;
  }
  // podman's cgroupfs manager: /libpod_parent/libpod-<id> (no scope unit).
  if (segment.starts_with("libpod-")) {
    std::string_view id = segment.substr(7);
    if (id.size() < 12 || !IsHex(id)) return false;  // libpod-conmon-<id>: the monitor
    info.container_id = Lower(id);
    info.runtime = "podman";
    return true;
  }
  if ((in_pod || parent == "docker") && segment.size() >= 12 && IsHex(segment)) {
    info.container_id = Lower(segment);
    info.runtime = parent == "docker" ? "docker" : "";
    return true;
  }
  return false;
}

std::string ReadFile(const std::string& path, bool* exists) {
  std::ifstream in(path, std::ios::binary);
  *exists = in.is_open();
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The value of "Key:\t..." in a status file, or "" when absent.
std::string_view StatusField(std::string_view text, std::string_view key) {
  for (std::string_view line : Split(text, '\n')) {
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == ':') {
      std::string_view v = line.substr(key.size() + 1);
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      return v;
    }
  }
  return {};
}

std::vector<int64_t> Numbers(std::string_view text) {
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\t') ++j;
    if (j > i) {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(text.data() + i, text.data() + j, v);
      if (ec != std::errc() || p != text.data() + j) return {};
      out.push_back(v);
    }
    i = j;
  }
  return out;
}

uint64_t StartTimeOfStat(std::string_view stat) {
  // "pid (comm) S ppid ...": comm may hold spaces and parentheses; fields
  // resume after the last ')'. Field 3 is the state; 22 the start time.
  const size_t paren = stat.rfind(')');
  if (paren == std::string_view::npos || paren + 2 > stat.size()) return 0;
  std::vector<std::string_view> fields = Split(stat.substr(paren + 2), ' ');
  constexpr size_t kStartTimeIndex = 22 - 3;
  if (fields.size() <= kStartTimeIndex) return 0;
  uint64_t v = 0;
  std::string_view f = fields[kStartTimeIndex];
  auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
  return ec == std::errc() ? v : 0;
}

}  // namespace

CgroupInfo ParseCgroupPath(std::string_view path) {
  CgroupInfo info;
  info.path = std::string(path);
  std::vector<std::string_view> segments;
  for (std::string_view s : Split(path, '/')) {
    if (!s.empty()) segments.push_back(s);
  }
  size_t first = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (std::string qos = QosOfSegment(segments[i]); !qos.empty()) info.qos = qos;
    if (std::string uid = PodUidOfSegment(segments[i]); !uid.empty()) {
      info.pod_uid = uid;
      first = i + 1;
      break;
    }
  }
  if (!info.pod_uid.empty() && info.qos.empty()) info.qos = "guaranteed";
  if (info.pod_uid.empty()) info.qos.clear();
  for (size_t i = first; i < segments.size(); ++i) {
    if (ContainerOfSegment(segments[i], i > 0 ? segments[i - 1] : std::string_view(),
                           !info.pod_uid.empty(), info)) {
      break;
    }
  }
  return info;
}

CgroupInfo ParseCgroupFile(std::string_view text) {
  std::optional<CgroupInfo> unified, v1_found, fallback;
  for (std::string_view line : Split(text, '\n')) {
    if (line.empty()) continue;
    const size_t a = line.find(':');
    const size_t b = a == std::string_view::npos ? a : line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    CgroupInfo info = ParseCgroupPath(line.substr(b + 1));
    const bool found = !info.pod_uid.empty() || !info.container_id.empty();
    if (line.substr(0, b + 1) == "0::") {
      unified = std::move(info);
    } else if (found && !v1_found) {
      v1_found = std::move(info);
    } else if (!fallback) {
      fallback = std::move(info);
    }
  }
  const bool unified_names_one =
      unified && (!unified->pod_uid.empty() || !unified->container_id.empty());
  CgroupInfo out;
  if (v1_found && !unified_names_one) {
    out = *v1_found;
  } else if (unified) {
    out = *unified;
  } else {
    out = fallback.value_or(CgroupInfo{});
  }
  if (unified) out.unified_path = unified->path;
  return out;
}

uint64_t ReadStartTime(const std::string& proc_root, pid_t pid) {
  bool exists = false;
  const std::string stat = ReadFile(proc_root + "/" + std::to_string(pid) + "/stat", &exists);
  return exists ? StartTimeOfStat(stat) : 0;
}

StatusOr<ProcessIdentity> IdentifyProcess(const std::string& proc_root, pid_t pid) {
  if (pid <= 0) return InvalidArgument("pid must be positive, not " + std::to_string(pid));
  const std::string dir = proc_root + "/" + std::to_string(pid);
  bool exists = false;
  const std::string status = ReadFile(dir + "/status", &exists);
  if (!exists || status.empty()) return NotFound("no process " + std::to_string(pid));
  ProcessIdentity id;
  id.host_pid = pid;
  const std::vector<int64_t> nspid = Numbers(StatusField(status, "NSpid"));
  // Kernels before 4.1 have no NSpid: the process is then in the host namespace.
  id.container_pid = nspid.empty() ? pid : static_cast<pid_t>(nspid.back());
  const std::vector<int64_t> uids = Numbers(StatusField(status, "Uid"));
  if (uids.size() < 2) return Internal(dir + "/status has no readable Uid line");
  id.uid = static_cast<uid_t>(uids[1]);
  id.start_time = ReadStartTime(proc_root, pid);
  if (id.start_time == 0) return NotFound("no process " + std::to_string(pid) + " (it exited)");
  const std::string cgroup = ReadFile(dir + "/cgroup", &exists);
  if (!exists) return NotFound("no process " + std::to_string(pid) + " (it exited)");
  id.cgroup = ParseCgroupFile(cgroup);
  const std::string environ = ReadFile(dir + "/environ", &exists);
  for (std::string_view entry : Split(environ, '\0')) {
    for (std::string_view key : {"POD_NAME", "POD_NAMESPACE", "CONTAINER_NAME"}) {
      if (entry.size() > key.size() && entry.starts_with(key) && entry[key.size()] == '=') {
        // Kubernetes names are ASCII (DNS labels); other bytes, possibly not
        // UTF-8, would make every JSON view of the tenant throw: '?'.
        std::string value(entry.substr(key.size() + 1));
        for (char& c : value) {
          if (static_cast<unsigned char>(c) >= 0x80) c = '?';
        }
        id.environment[std::string(key)] = std::move(value);
      }
    }
  }
  // The process may have exited and its pid been reused while we read:
  // the start time read last must still be the one read first.
  if (ReadStartTime(proc_root, pid) != id.start_time) {
    return NotFound("no process " + std::to_string(pid) + " (it exited)");
  }
  return id;
}

ClaimedHints ShownHints(const ProcessIdentity& identity, const ClaimedHints& claimed) {
  ClaimedHints shown;
  shown.pod_uid = claimed.pod_uid;
  if (identity.cgroup.pod_uid.empty()) return shown;
  auto agrees = [&](const std::string& value, const char* env) {
    auto e = identity.environment.find(env);
    return e == identity.environment.end() || e->second == value;
  };
  if (agrees(claimed.pod_name, "POD_NAME")) shown.pod_name = claimed.pod_name;
  if (agrees(claimed.pod_namespace, "POD_NAMESPACE")) shown.pod_namespace = claimed.pod_namespace;
  if (agrees(claimed.container_name, "CONTAINER_NAME")) {
    shown.container_name = claimed.container_name;
  }
  return shown;
}

std::vector<std::string> CheckHints(const ProcessIdentity& identity, const ClaimedHints& claimed) {
  std::vector<std::string> conflicts;
  const bool in_pod = !identity.cgroup.pod_uid.empty();
  if (!claimed.pod_uid.empty()) {
    const std::string canonical = CanonicalPodUid(claimed.pod_uid);
    if (in_pod && canonical != identity.cgroup.pod_uid) {
      conflicts.push_back("pod_uid: claimed \"" + claimed.pod_uid +
                          "\", but the process's cgroup is pod " + identity.cgroup.pod_uid);
    }
  }
  struct Field {
    const char* name;
    const char* env;
    const std::string& value;
  };
  for (const Field& f :
       {Field{"pod_uid", "", claimed.pod_uid}, Field{"pod_name", "POD_NAME", claimed.pod_name},
        Field{"pod_namespace", "POD_NAMESPACE", claimed.pod_namespace},
        Field{"container_name", "CONTAINER_NAME", claimed.container_name}}) {
    if (f.value.empty()) continue;
    if (!in_pod) {
      conflicts.push_back(std::string(f.name) + ": claimed \"" + f.value +
                          "\", but the process's cgroup (" + identity.cgroup.path +
                          ") is in no pod");
      continue;
    }
    auto env = identity.environment.find(f.env);
    if (env != identity.environment.end() && env->second != f.value) {
      conflicts.push_back(std::string(f.name) + ": claimed \"" + f.value +
                          "\", but the process's environment says \"" + env->second + "\"");
    }
  }
  return conflicts;
}

}  // namespace gpuslice::daemon
