#include "cli/status_command.h"

#include <cstdio>
#include <string>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/flag_checks.h"
#include "cli/group_report.h"
#include "cli/paths.h"
#include "common/clock.h"
#include "shm/group_segment.h"

namespace gpuslice::cli {
namespace {

struct StatusOptions {
  std::string shm_dir;
  std::string group;
  bool json = false;
  bool all = false;
  bool gc = false;
  int64_t gc_grace_s = kDefaultGroupGcGraceS;
};

// Removes the segments of `names` that nobody is attached to and that have
// been idle for the grace period; returns the names that are left.
std::vector<std::string> Collect(const std::string& dir, std::vector<std::string> names,
                                 int64_t grace_s) {
  std::vector<std::string> kept;
  for (std::string& name : names) {
    auto removed =
        GroupSegment::RemoveIfAbandoned(dir, name, grace_s * 1'000'000'000, MonotonicNs());
    if (!removed.ok()) {
      fprintf(stderr, "gpuslice: warning: %s\n", removed.status().message().c_str());
    } else if (*removed) {
      fprintf(stderr, "gpuslice: removed group '%s': no process attached for %llds or more\n",
              name.c_str(), static_cast<long long>(grace_s));
      continue;
    }
    kept.push_back(std::move(name));
  }
  return kept;
}

void Status(const StatusOptions& o) {
  const std::string dir = ShmDir(o.shm_dir);
  std::vector<std::string> names;
  if (o.group.empty()) {
    names = GroupSegment::ListGroups(dir);
  } else {
    names.push_back(o.group);
  }
  if (o.gc) names = Collect(dir, std::move(names), o.gc_grace_s);
  std::vector<GroupReport> reports;
  int hidden = 0;
  int not_ours = 0;
  for (const std::string& name : names) {
    auto segment = GroupSegment::Open(dir, name, /*create=*/false);
    if (!segment.ok()) {
      if (!o.group.empty()) Fail(segment.status().message() + " in " + dir);
      if (segment.status().code() == StatusCode::kPermissionDenied) {
        ++not_ours;  // another user's group: not an error, and not shown
        continue;
      }
      fprintf(stderr, "gpuslice: warning: skipping %s: %s\n",
              GroupSegment::PathFor(dir, name).c_str(), segment.status().message().c_str());
      continue;
    }
    (*segment)->ReapDead();
    GroupReport report = ReadGroupReport(**segment, MonotonicNs());
    if (!report.live && !o.all && o.group.empty()) {
      ++hidden;
      continue;
    }
    reports.push_back(std::move(report));
  }
  std::string out = o.json ? StatusJson(reports).dump(2) + "\n" : StatusText(reports);
  if (!o.json && not_ours > 0) {
    out += std::to_string(not_ours) + (not_ours == 1 ? " group belongs" : " groups belong") +
           " to other users (root sees every group)\n";
  }
  if (!o.json && hidden > 0) {
    out += std::to_string(hidden) + (hidden == 1 ? " idle group" : " idle groups") +
           " not shown (--all shows them, --gc removes those idle for " +
           std::to_string(o.gc_grace_s) + "s)\n";
  }
  fputs(out.c_str(), stdout);
}

}  // namespace

void AddStatusCommand(CLI::App& app) {
  auto* o = new StatusOptions;  // lives as long as the process: CLI11 keeps pointers
  CLI::App* status = app.add_subcommand(
      "status", "Show each group's devices, limits, memory in use and live members");
  status->add_option("--shm-dir", o->shm_dir,
                     "Directory of the group segments (default: $GPUSLICE_SHM_DIR or "
                     "/dev/shm/gpuslice)");
  status->add_option("--group", o->group, "Show only this group")->check(GroupIdCheck());
  status->add_flag("--json", o->json, "Machine-readable output (fields documented in the README)");
  status->add_flag("--all", o->all,
                   "Also show idle groups (no process attached; shown with their idle time)");
  status->add_flag("--gc", o->gc, "First remove idle groups' segments older than --gc-grace-s");
  status
      ->add_option("--gc-grace-s", o->gc_grace_s,
                   "Idle time after which --gc removes a group (seconds, default 600)")
      ->check(CLI::NonNegativeNumber);
  status->callback([o] { Status(*o); });
}

}  // namespace gpuslice::cli
