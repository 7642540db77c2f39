#include "cli/limit_command.h"

#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/common_flags.h"
#include "cli/exit_codes.h"
#include "cli/flag_checks.h"
#include "cli/group_report.h"
#include "cli/limit_flags.h"
#include "cli/paths.h"
#include "cli/process_lifetime.h"
#include "common/quantity.h"
#include "shm/group_segment.h"
#include "shm/segment_dirs.h"

namespace gpuslice::cli {
namespace {

struct LimitSetOptions {
  std::string group;
  std::string device;   // "" for every device
  std::string memory;   // as typed; "" if not given
  std::string compute;  // as typed; "" if not given
  std::string shm_dir;
};

std::string MemoryText(uint64_t bytes) {
  return bytes == kUnlimitedBytes ? "unlimited" : FormatBytes(bytes);
}

std::string ComputeText(uint32_t percent) {
  return percent >= kUnlimitedPercent ? "unlimited" : std::to_string(percent) + "%";
}

// Segment device indexes that `device` names ("" for all of them).
std::vector<int> SelectDevices(const GroupSegment& segment, const std::string& device) {
  const int n = segment.device_count();
  if (n == 0) Fail("group '" + segment.group() + "' has no devices yet");
  std::vector<int> selected;
  if (device.empty()) {
    for (int d = 0; d < n; ++d) selected.push_back(d);
    return selected;
  }
  bool digits = true;
  for (char c : device) digits = digits && isdigit(static_cast<unsigned char>(c));
  int d = -1;
  if (digits && device.size() < 4) {
    d = std::stoi(device);
  } else if (!digits) {
    d = segment.FindDevice(device);
    if (d < 0) d = segment.FindDevice("GPU-" + device);
  }
  if (d < 0 || d >= n) {
    Fail("group '" + segment.group() + "' has no device '" + device + "' (it has " +
         std::to_string(n) + "; see `gpuslice status`)");
  }
  selected.push_back(d);
  return selected;
}

void LimitSet(const LimitSetOptions& o) {
  if (o.memory.empty() && o.compute.empty()) {
    Fail("limit set: give --memory, --compute or both", kExitUsage);
  }
  const std::string dir = SegmentDirOf(ShmDir(o.shm_dir), o.group);  // a claim's own, or shared
  auto segment = GroupSegment::Open(dir, o.group, /*create=*/false);
  if (!segment.ok()) Fail(segment.status().message() + " in " + dir);
  GroupSegment& s = **segment;
  for (int d : SelectDevices(s, o.device)) {
    const std::string name = "group '" + s.group() + "' device " + std::to_string(d) + " (" +
                             ShortUuid(s.DeviceUuid(d)) + ")";
    if (!o.memory.empty()) {
      const uint64_t before = s.MemoryLimit(d);
      const uint64_t after = *ParseMemoryLimit(o.memory);  // checked while parsing
      s.SetMemoryLimit(d, after);
      printf("%s: memory limit %s -> %s\n", name.c_str(), MemoryText(before).c_str(),
             MemoryText(after).c_str());
      if (after != kUnlimitedBytes && s.ledger().MemoryUsed(d) > after) {
        printf("%s: %s in use is above the new limit; allocations fail until it drops\n",
               name.c_str(), FormatBytes(s.ledger().MemoryUsed(d)).c_str());
      }
    }
    if (!o.compute.empty()) {
      const uint32_t before = s.ComputeLimit(d);
      const uint32_t after = *ParseComputeLimit(o.compute);
      s.SetComputeLimit(d, after);
      printf("%s: compute limit %s -> %s\n", name.c_str(), ComputeText(before).c_str(),
             ComputeText(after).c_str());
    }
  }
}

}  // namespace

void AddLimitCommands(CLI::App& app) {
  CLI::App* limit = app.add_subcommand("limit", "Change a group's limits while it runs");
  limit->require_subcommand(1);
  auto* o = ProcessLifetime<LimitSetOptions>();  // CLI11 keeps pointers (process_lifetime.h)
  CLI::App* set = limit->add_subcommand(
      "set", "Set a group's memory and/or compute limit on one device or all of them");
  set->add_option("--group", o->group, "The group")->required()->check(GroupIdCheck());
  set->add_option("--device", o->device,
                  "Device index in the group (as `gpuslice status` shows) or GPU UUID "
                  "(default: every device)");
  set->add_option("--memory", o->memory, "Memory limit (4GiB, 512MiB…), or 'unlimited'")
      ->check(CheckedBy(ParseMemoryLimit, "QUANTITY|unlimited"));
  set->add_option("--compute", o->compute, "Compute limit, percent 1-100 (100: unlimited)")
      ->check(CheckedBy(ParseComputeLimit, "PERCENT"));
  AddShmDirOption(*set, o->shm_dir);
  set->callback([o] { LimitSet(*o); });
}

}  // namespace gpuslice::cli
