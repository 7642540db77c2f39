#include "cli/top/top_source.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "cli/registry_view.h"
#include "gpuslice/group_segment.h"
#include "shm/segment_dirs.h"

namespace gpuslice::cli::top {
namespace {

using json = nlohmann::json;

const json& Field(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it != j.end() ? *it : kNull;
}

const json& Array(const json& j, const char* key) {
  static const json kEmpty = json::array();
  const json& a = Field(j, key);
  return a.is_array() ? a : kEmpty;
}

std::string Str(const json& j, const char* key) {
  const json& s = Field(j, key);
  return s.is_string() ? s.get<std::string>() : "";
}

std::optional<double> Double(const json& j, const char* key) {
  const json& v = Field(j, key);
  if (!v.is_number()) return std::nullopt;
  return v.get<double>();
}

std::optional<uint64_t> UInt(const json& j, const char* key) {
  const json& v = Field(j, key);
  if (!v.is_number_unsigned()) return std::nullopt;
  return v.get<uint64_t>();
}

int Index(const json& j) {
  const json& v = Field(j, "index");
  return v.is_number_integer() ? v.get<int>() : -1;
}

}  // namespace

std::vector<GroupSnapshot> ReadSegments(const std::string& dir) {
  std::vector<GroupSnapshot> out;
  for (const std::string& name : ListAllGroups(dir)) {  // claims' own directories too
    auto segment = GroupSegment::Open(SegmentDirOf(dir, name), name, /*create=*/false);
    if (!segment.ok()) continue;  // another user's, or gone since the listing
    (*segment)->ReapDead();
    out.push_back((*segment)->Snapshot());
  }
  return out;
}

std::vector<GpuInfo> ParseGpus(const json& gpus_body) {
  std::vector<GpuInfo> out;
  for (const json& g : Array(gpus_body, "gpus")) {
    GpuInfo gpu;
    gpu.index = Index(g);
    gpu.uuid = Str(g, "uuid");
    gpu.name = Str(g, "name");
    gpu.util_percent = Double(Field(g, "utilization"), "gpu_percent");
    gpu.memory_used = UInt(Field(g, "memory"), "used_bytes");
    gpu.memory_total = UInt(Field(g, "memory"), "total_bytes");
    gpu.power_watts = Double(Field(g, "power"), "draw_watts");
    gpu.power_limit_watts = Double(Field(g, "power"), "limit_watts");
    if (!gpu.uuid.empty()) out.push_back(std::move(gpu));
  }
  return out;
}

void AddMigInstances(const json& mig_gpus, std::vector<GpuInfo>& gpus) {
  if (!mig_gpus.is_array()) return;
  for (const json& g : mig_gpus) {
    if (Str(g, "mode") != "enabled") continue;
    for (GpuInfo& gpu : gpus) {
      if (gpu.uuid != Str(g, "uuid")) continue;
      for (const json& m : Array(g, "instances")) {
        gpu.mig.push_back({.profile = Str(m, "profile"),
                           .owner = Str(m, "owner"),
                           .memory_used = UInt(m, "memory_used_bytes"),
                           .memory_total = UInt(m, "memory_bytes").value_or(0)});
      }
    }
  }
}

std::vector<GroupOnGpu> ParseGroups(const json& groups_body, const std::vector<GpuInfo>& gpus) {
  std::vector<GroupOnGpu> out;
  for (const json& g : Array(groups_body, "groups")) {
    const std::string id = Str(g, "id");
    if (id.empty()) continue;
    const bool group_paused = Field(g, "paused").is_boolean() && Field(g, "paused").get<bool>();
    for (const json& d : Array(g, "gpus")) {
      GroupOnGpu row;
      row.group = id;
      row.uuid = Str(d, "uuid");
      row.gpu_index = Index(d);
      if (row.gpu_index < 0) {
        for (const GpuInfo& gpu : gpus) {
          if (gpu.uuid == row.uuid) row.gpu_index = gpu.index;
        }
      }
      const json& limit = Field(d, "limit");
      if (auto c = UInt(limit, "compute_percent")) row.compute_limit = static_cast<uint32_t>(*c);
      row.memory_limit = UInt(limit, "memory_bytes");
      // The scheduler's fields (sched-api): per GPU "schedule" and "grant_percent".
      const json& schedule = Field(d, "schedule");
      row.request_percent = Double(schedule, "request");
      if (auto l = UInt(schedule, "limit"); l && !row.compute_limit && *l < 100) {
        row.compute_limit = static_cast<uint32_t>(*l);
      }
      row.grant_percent = Double(d, "grant_percent");
      if (auto s = Double(d, "share")) row.share_percent = *s * 100;
      row.memory_used = UInt(d, "memory_used_bytes").value_or(0);
      row.members = static_cast<int>(Array(g, "members").size());
      const json& sp = Field(schedule, "paused");
      row.paused = group_paused || (sp.is_boolean() && sp.get<bool>());
      out.push_back(std::move(row));
    }
  }
  return out;
}

std::vector<TenantInfo> ParseTenants(const json& tenants_body) {
  std::vector<TenantInfo> out;
  for (const json& t : Array(tenants_body, "tenants")) {
    TenantInfo tenant;
    tenant.group = Str(t, "group");
    const json& pid = Field(t, "host_pid");
    tenant.pid = pid.is_number_integer() ? pid.get<int32_t>() : 0;
    tenant.name = PodText(t);
    if (tenant.name.empty()) tenant.name = Str(t, "container");
    for (const json& d : Array(t, "gpus")) {
      tenant.memory_used += UInt(d, "memory_used_bytes").value_or(0);
      if (auto s = Double(d, "share"))
        tenant.share_percent = tenant.share_percent.value_or(0) + *s * 100;
    }
    out.push_back(std::move(tenant));
  }
  return out;
}

void MergeSegments(const std::vector<GroupSnapshot>& segments, Sample& sample) {
  std::set<std::pair<std::string, std::string>> in_segment;  // (group, GPU UUID)
  std::set<std::string> groups_with_tenants;
  for (const TenantInfo& t : sample.tenants) groups_with_tenants.insert(t.group);
  for (const GroupSnapshot& s : segments) {
    for (size_t d = 0; d < s.devices.size(); ++d) {
      const GroupSnapshot::Device& dev = s.devices[d];
      in_segment.emplace(s.group, dev.uuid);
      auto row = std::find_if(sample.groups.begin(), sample.groups.end(), [&](const GroupOnGpu& g) {
        return g.group == s.group && g.uuid == dev.uuid;
      });
      bool from_daemon = true;
      if (row == sample.groups.end()) {
        GroupOnGpu added;
        added.group = s.group;
        added.uuid = dev.uuid;
        for (const GpuInfo& gpu : sample.gpus) {
          if (gpu.uuid == dev.uuid) added.gpu_index = gpu.index;
        }
        sample.groups.push_back(std::move(added));
        row = std::prev(sample.groups.end());
        from_daemon = false;
      }
      // The daemon's limits are the group's (it writes them into the
      // segment within a tick); the segment's stand when it has none.
      if (!row->compute_limit && dev.compute_limit != kUnlimitedPercent) {
        row->compute_limit = dev.compute_limit;
      }
      if (!row->memory_limit && dev.memory_limit != kUnlimitedBytes) {
        row->memory_limit = dev.memory_limit;
      }
      row->memory_used = dev.memory_used;  // the ledger the memory limit holds
      // The controller's measurement while the group has members; without
      // any, nothing launches (the last measurement is stale).
      if (!s.members.empty() && dev.share_bp >= 0) {
        row->share_percent = dev.share_bp / 100.0;
      } else if (s.members.empty() && !from_daemon) {
        row->share_percent = 0.0;
      }
      if (!row->grant_percent && dev.grant_bp > 0) row->grant_percent = dev.grant_bp / 100.0;
      row->throttled = dev.throttled;
      row->paused = row->paused || s.paused;
      row->members = std::max(row->members, static_cast<int>(s.members.size()));
    }
    if (!groups_with_tenants.contains(s.group)) {
      for (const GroupSnapshot::Member& m : s.members) {
        TenantInfo t;
        t.group = s.group;
        t.pid = m.pid;
        t.name = m.name;
        for (uint64_t bytes : m.memory) t.memory_used += bytes;
        sample.tenants.push_back(std::move(t));
      }
    }
    for (const GroupSnapshot::Device& dev : s.devices) {
      const bool known = std::any_of(sample.gpus.begin(), sample.gpus.end(),
                                     [&](const GpuInfo& g) { return g.uuid == dev.uuid; });
      if (!known) {
        GpuInfo gpu;
        gpu.uuid = dev.uuid;
        sample.gpus.push_back(std::move(gpu));
      }
    }
  }
  // The daemon lists every group on every GPU; keep a group's GPUs it uses
  // (a segment device, memory or a share there), or its first if it uses none.
  const auto used = [&](const GroupOnGpu& g) {
    return in_segment.contains({g.group, g.uuid}) || g.memory_used > 0 ||
           (g.share_percent && *g.share_percent > 0);
  };
  std::set<std::string> groups_used;
  for (const GroupOnGpu& g : sample.groups) {
    if (used(g)) groups_used.insert(g.group);
  }
  std::set<std::string> kept_first;
  std::erase_if(sample.groups, [&](const GroupOnGpu& g) {
    if (used(g)) return false;
    if (groups_used.contains(g.group)) return true;
    return !kept_first.insert(g.group).second;
  });
}

Sample Collect(const DaemonClient* client, const std::string& socket, const SegmentReader& segments,
               int64_t now_ns) {
  Sample sample;
  sample.at_ns = now_ns;
  sample.socket = socket;
  sample.daemon_used = client != nullptr;
  if (client != nullptr) {
    auto gpus = client->GetJson("/v1/gpus");
    auto groups = gpus.ok() ? client->GetJson("/v1/groups") : gpus.status();
    auto tenants = groups.ok() ? client->GetJson("/v1/tenants") : groups.status();
    if (tenants.ok()) {
      sample.daemon_answered = true;
      sample.gpus = ParseGpus(*gpus);
      if (auto mig = client->GetJson("/v1/mig"); mig.ok()) {  // none from an older daemon
        AddMigInstances(Field(*mig, "gpus"), sample.gpus);
      }
      sample.groups = ParseGroups(*groups, sample.gpus);
      sample.tenants = ParseTenants(*tenants);
    } else {
      sample.daemon_error = tenants.status().message();
    }
  }
  MergeSegments(segments(), sample);
  return sample;
}

Sample FromDaemonSample(const json& data, const std::string& socket,
                        const std::vector<GroupSnapshot>& segments, int64_t now_ns) {
  Sample sample;
  sample.at_ns = now_ns;
  sample.socket = socket;
  sample.daemon_used = true;
  sample.daemon_answered = true;
  sample.gpus = ParseGpus(json{{"gpus", Field(data, "gpus")}});
  AddMigInstances(Field(data, "mig"), sample.gpus);
  sample.groups = ParseGroups(json{{"groups", Field(data, "groups")}}, sample.gpus);
  sample.tenants = ParseTenants(json{{"tenants", Field(data, "tenants")}});
  MergeSegments(segments, sample);
  return sample;
}

Sample LocalSample(std::vector<GpuInfo> gpus, const std::string& nvml_error, bool daemon_used,
                   const std::string& daemon_error, const std::string& socket,
                   const std::vector<GroupSnapshot>& segments, int64_t now_ns) {
  Sample sample;
  sample.at_ns = now_ns;
  sample.socket = socket;
  sample.daemon_used = daemon_used;
  sample.daemon_error = daemon_error;
  sample.nvml = nvml_error.empty();
  sample.nvml_error = nvml_error;
  sample.gpus = std::move(gpus);
  MergeSegments(segments, sample);
  return sample;
}

}  // namespace gpuslice::cli::top
