#include "sim/core/memory_limits.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace gpuslice::sim {
namespace {

std::string_view StripTrailingSlash(std::string_view p) {
  while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
  return p;
}

bool IsDirectory(const char* path) {
  struct stat st {};
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::string CgroupRoot() {
  const char* root = getenv("GPUSLICE_SIM_CGROUP_ROOT");
  std::string r = root != nullptr && root[0] != '\0' ? root : "/sys/fs/cgroup";
  return std::string(StripTrailingSlash(r));
}

bool IsCgroupV2Root(const std::string& root) {
  struct stat st {};
  return stat((root + "/cgroup.controllers").c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string UnifiedCgroupPath(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (line.substr(0, 3) == "0::" && line.size() > 3 && line[3] == '/') {
      return std::string(line.substr(3));
    }
    pos = end + 1;
  }
  return "";
}

std::string OwnCgroupPath() {
  const char* file = getenv("GPUSLICE_SIM_CGROUP_FILE");
  std::ifstream in(file != nullptr && file[0] != '\0' ? file : "/proc/self/cgroup");
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string rel = UnifiedCgroupPath(ss.str());
  if (rel.empty()) return "";
  return std::string(StripTrailingSlash(CgroupRoot() + rel));
}

bool CgroupAtOrBelow(std::string_view cgroup, std::string_view limit) {
  cgroup = StripTrailingSlash(cgroup);
  limit = StripTrailingSlash(limit);
  if (cgroup.empty() || limit.empty()) return false;
  if (cgroup.substr(0, limit.size()) != limit) return false;
  return cgroup.size() == limit.size() || limit == "/" || cgroup[limit.size()] == '/';
}

const MemoryLimitRecord* FindMemoryLimit(const DeviceState& d, std::string_view cgroup) {
  cgroup = StripTrailingSlash(cgroup);
  for (const MemoryLimitRecord& m : d.memory_limits) {
    if (m.cgroup[0] != '\0' && cgroup == m.cgroup) return &m;
  }
  return nullptr;
}

Status SetMemoryLimit(DeviceState& d, std::string_view cgroup, uint64_t soft, uint64_t hard) {
  cgroup = StripTrailingSlash(cgroup);
  if (cgroup.empty() || cgroup.front() != '/' || cgroup.size() >= kCgroupPathBytes) {
    return InvalidArgument("cgroup path must be absolute and shorter than " +
                           std::to_string(kCgroupPathBytes) + " bytes");
  }
  if (soft > hard) return InvalidArgument("soft limit exceeds hard limit");
  auto* existing = const_cast<MemoryLimitRecord*>(FindMemoryLimit(d, cgroup));
  const bool clear = soft == 0 && hard == kMemoryLimitMax;
  if (clear) {
    if (existing != nullptr) *existing = MemoryLimitRecord{};
    return Status::Ok();
  }
  MemoryLimitRecord* slot = existing;
  for (int i = 0; slot == nullptr && i < kMaxMemoryLimits; ++i) {
    if (d.memory_limits[i].cgroup[0] == '\0') slot = &d.memory_limits[i];
  }
  if (slot == nullptr) {
    return ResourceExhausted("at most " + std::to_string(kMaxMemoryLimits) +
                             " cgroup memory limits per device");
  }
  memset(slot->cgroup, 0, sizeof slot->cgroup);
  memcpy(slot->cgroup, cgroup.data(), cgroup.size());
  slot->soft_bytes = soft;
  slot->hard_bytes = hard;
  return Status::Ok();
}

uint64_t CgroupUsedBytes(const SimState& s, int device, std::string_view cgroup) {
  uint64_t used = 0;
  for (const ContextRecord& c : s.contexts) {
    if (c.status != kContextActive || c.device != device || c.process_slot < 0) continue;
    const ProcessRecord& p = s.processes[c.process_slot];
    if (!CgroupAtOrBelow(p.cgroup, cgroup)) continue;
    used += c.reservation_bytes + c.allocated_bytes - c.managed_bytes;
  }
  return used;
}

MemoryView ViewFromCgroup(const SimState& s, int device, std::string_view cgroup) {
  const DeviceState& d = s.devices[device];
  MemoryView v;
  v.total_bytes = d.info.total_bytes;
  v.free_bytes = d.info.total_bytes - std::min(d.used_bytes, d.info.total_bytes);
  v.used_bytes = v.total_bytes - v.free_bytes;
  if (cgroup.empty()) return v;
  uint64_t best_headroom = ~uint64_t{0};
  for (const MemoryLimitRecord& m : d.memory_limits) {
    if (m.cgroup[0] == '\0' || m.hard_bytes == kMemoryLimitMax) continue;
    if (!CgroupAtOrBelow(cgroup, m.cgroup)) continue;
    const uint64_t used = CgroupUsedBytes(s, device, m.cgroup);
    const uint64_t hard = std::min(m.hard_bytes, d.info.total_bytes);
    const uint64_t headroom = hard - std::min(used, hard);
    if (headroom < best_headroom) {
      best_headroom = headroom;
      v.limited = true;
      v.total_bytes = hard;
      v.free_bytes =
          std::min(headroom, d.info.total_bytes - std::min(d.used_bytes, d.info.total_bytes));
      v.used_bytes = v.total_bytes - v.free_bytes;
    }
  }
  return v;
}

Status CheckCgroupCharge(const SimState& s, int device, std::string_view cgroup, uint64_t bytes) {
  if (cgroup.empty()) return Status::Ok();
  const DeviceState& d = s.devices[device];
  for (const MemoryLimitRecord& m : d.memory_limits) {
    if (m.cgroup[0] == '\0' || m.hard_bytes == kMemoryLimitMax) continue;
    if (!CgroupAtOrBelow(cgroup, m.cgroup)) continue;
    const uint64_t used = CgroupUsedBytes(s, device, m.cgroup);
    if (used > m.hard_bytes || bytes > m.hard_bytes - used) {
      return ResourceExhausted("out of memory on GPU " + std::to_string(device) + ": cgroup " +
                               m.cgroup + " hard limit " + std::to_string(m.hard_bytes) +
                               " bytes, " + std::to_string(used) + " used, " +
                               std::to_string(bytes) + " requested");
    }
  }
  return Status::Ok();
}

bool WithinSoftGuarantee(const SimState& s, int device, std::string_view cgroup, uint64_t bytes) {
  if (cgroup.empty()) return false;
  for (const MemoryLimitRecord& m : s.devices[device].memory_limits) {
    if (m.cgroup[0] == '\0' || m.soft_bytes == 0 || !CgroupAtOrBelow(cgroup, m.cgroup)) continue;
    const uint64_t used = CgroupUsedBytes(s, device, m.cgroup);
    if (used <= m.soft_bytes && bytes <= m.soft_bytes - used) return true;
  }
  return false;
}

int PickEvictionVictim(const SimState& s, int device, int requester) {
  int victim = -1;
  uint64_t best_excess = 0, best_bytes = 0;
  for (int i = 0; i < kMaxContexts; ++i) {
    const ContextRecord& c = s.contexts[i];
    if (c.status != kContextActive || c.device != device || c.process_slot < 0 ||
        c.process_slot == requester || (c.flags & kContextMpsTerminated) != 0) {
      continue;
    }
    const uint64_t bytes = c.reservation_bytes + c.allocated_bytes - c.managed_bytes;
    // How far its cgroup borrows: the most any applicable limit's use is above
    // its soft limit; under no limit at all, all of its memory (dmem.min is 0
    // where none is set).
    const std::string_view cgroup = s.processes[c.process_slot].cgroup;
    bool limited = false;
    uint64_t excess = 0;
    for (const MemoryLimitRecord& m : s.devices[device].memory_limits) {
      if (m.cgroup[0] == '\0' || !CgroupAtOrBelow(cgroup, m.cgroup)) continue;
      limited = true;
      const uint64_t used = CgroupUsedBytes(s, device, m.cgroup);
      if (used > m.soft_bytes) excess = std::max(excess, used - m.soft_bytes);
    }
    if (!limited) excess = bytes;
    if (excess == 0 || bytes == 0) continue;  // within its guarantee, or nothing to take
    if (victim < 0 || excess > best_excess || (excess == best_excess && bytes > best_bytes)) {
      victim = i;
      best_excess = excess;
      best_bytes = bytes;
    }
  }
  return victim;
}

void PruneRemovedCgroups(DeviceState& d) {
  for (MemoryLimitRecord& m : d.memory_limits) {
    if (m.cgroup[0] != '\0' && !IsDirectory(m.cgroup)) m = MemoryLimitRecord{};
  }
}

}  // namespace gpuslice::sim
