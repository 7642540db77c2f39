#include "daemon/groups/member_slots.h"

#include <atomic>
#include <fstream>
#include <sstream>

namespace gpuslice::daemon {
namespace {

// The pid of `host_pid` in its innermost namespace (NSpid's last field;
// the host pid where the kernel has no NSpid line); 0 if unreadable.
int32_t InnermostPid(const std::string& proc_root, int32_t host_pid) {
  std::ifstream in(proc_root + "/" + std::to_string(host_pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    int32_t pid = 0;
    int32_t last = 0;
    while (fields >> pid) last = pid;
    return last;
  }
  return in.eof() ? host_pid : 0;
}

// Field 22 of /proc/<pid>/stat; 0 if unreadable.
uint64_t StartTime(const std::string& proc_root, int32_t host_pid) {
  std::ifstream in(proc_root + "/" + std::to_string(host_pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command (field 2) may hold spaces and parentheses: count from its end.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i < 22 && fields >> field; ++i) {
  }
  uint64_t start = 0;
  return fields >> start ? start : 0;
}

}  // namespace

std::vector<SlotOwner> SlotOwners(const GroupSegment& segment) {
  std::vector<SlotOwner> out;
  for (const GroupSegment::MemberRef& m : segment.Members()) {
    const ProcessSlot& p = segment.layout().slots[m.slot];
    out.push_back({.slot = m.slot,
                   .pid = m.pid,
                   .start_time = std::atomic_ref<const uint64_t>(p.start_time).load()});
  }
  return out;
}

std::vector<control::ComputeController::Member> MatchSlots(const std::vector<int32_t>& host_pids,
                                                           const std::vector<SlotOwner>& owners,
                                                           const std::string& proc_root) {
  std::vector<control::ComputeController::Member> out;
  out.reserve(host_pids.size());
  for (int32_t host : host_pids) {
    control::ComputeController::Member m{.pid = host};
    if (host > 0) {
      const int32_t inner = InnermostPid(proc_root, host);
      const uint64_t start = inner != 0 ? StartTime(proc_root, host) : 0;
      for (const SlotOwner& o : owners) {
        if (inner != 0 && start != 0 && o.pid == inner && o.start_time == start) {
          m.slot = o.slot;
          break;
        }
      }
    }
    out.push_back(m);
  }
  return out;
}

}  // namespace gpuslice::daemon
