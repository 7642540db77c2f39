#include "sim/core/process_identity.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "sim/core/node_helper.h"

namespace gpuslice::sim {
namespace {

constexpr int kHelperTimeoutMs = 1000;

// Reads a small /proc/self file into `buf`; bytes read, or -1.
ssize_t ReadSelf(const char* file, char* buf, size_t size) {
  const int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n >= 0) buf[n] = '\0';
  return n;
}

}  // namespace

uint64_t OwnPidNamespace() {
  char link[64];
  const ssize_t n = readlink("/proc/self/ns/pid", link, sizeof link - 1);
  if (n <= 0) return 0;
  link[n] = '\0';
  const char* open_bracket = strchr(link, '[');  // "pid:[4026531836]"
  return open_bracket != nullptr ? strtoull(open_bracket + 1, nullptr, 10) : 0;
}

std::vector<int32_t> OwnNsPids() {
  char buf[4096];
  std::vector<int32_t> pids;
  if (ReadSelf("/proc/self/status", buf, sizeof buf) <= 0) return pids;
  const char* line = strstr(buf, "\nNSpid:");
  if (line == nullptr) return pids;
  const char* p = line + strlen("\nNSpid:");
  for (;;) {
    char* end = nullptr;
    const long v = strtol(p, &end, 10);
    if (end == p) break;
    pids.push_back(static_cast<int32_t>(v));
    p = end;
    if (*p == '\n' || *p == '\0') break;
  }
  return pids;
}

uint64_t OwnStartTime() {
  char buf[1024];
  if (ReadSelf("/proc/self/stat", buf, sizeof buf) <= 0) return 0;
  const char* p = strrchr(buf, ')');  // comm may hold spaces and parentheses
  if (p == nullptr || p[1] == '\0') return 0;
  p += 2;  // field 3
  for (int field = 3; field < 22; ++field) {
    p = strchr(p, ' ');
    if (p == nullptr) return 0;
    ++p;
  }
  return strtoull(p, nullptr, 10);
}

void OwnProcessName(char* out, size_t size) {
  if (size == 0) return;
  out[0] = '\0';
  char buf[64];
  if (ReadSelf("/proc/self/comm", buf, sizeof buf) <= 0) return;
  buf[strcspn(buf, "\n")] = '\0';
  snprintf(out, size, "%s", buf);
}

std::string NodeSocketPath(const std::string& state_path) {
  if (const char* s = getenv("GPUSLICE_SIM_NODE_SOCKET"); s != nullptr && *s != '\0') return s;
  return state_path + ".node";
}

ProcessIdentity LearnProcessIdentity(const std::string& socket_path) {
  ProcessIdentity id;
  id.local_pid = getpid();
  id.pid = id.local_pid;
  id.pid_ns = OwnPidNamespace();
  id.start_time = OwnStartTime();
  auto reply = AskNodeHelper(socket_path, kHelperTimeoutMs);
  if (reply.ok()) {
    id.pid = reply->pid;
    id.pid_ns = reply->pid_ns;
    if (reply->start_time != 0) id.start_time = reply->start_time;
    id.host_known = true;
  } else if (reply.status().code() != StatusCode::kNotFound) {
    GS_LOG(kWarn, "sim", "host pid unknown, using pid %d of this namespace: %s",
           static_cast<int>(id.local_pid), reply.status().message().c_str());
  }
  return id;
}

uint64_t ProcViewNamespace(const ProcessIdentity& self) {
  const std::vector<int32_t> ns_pids = OwnNsPids();
  if (ns_pids.size() == 1) return OwnPidNamespace();
  if (ns_pids.size() > 1 && self.host_known && ns_pids.front() == self.pid) return self.pid_ns;
  return 0;
}

}  // namespace gpuslice::sim
