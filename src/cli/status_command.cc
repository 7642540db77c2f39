#include "cli/status_command.h"

#include <cstdio>
#include <string>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/flag_checks.h"
#include "cli/group_report.h"
#include "cli/paths.h"
#include "shm/group_segment.h"

namespace gpuslice::cli {
namespace {

struct StatusOptions {
  std::string shm_dir;
  std::string group;
  bool json = false;
};

void Status(const StatusOptions& o) {
  const std::string dir = ShmDir(o.shm_dir);
  std::vector<std::string> names;
  if (o.group.empty()) {
    names = GroupSegment::ListGroups(dir);
  } else {
    names.push_back(o.group);
  }
  std::vector<GroupReport> reports;
  for (const std::string& name : names) {
    auto segment = GroupSegment::Open(dir, name, /*create=*/false);
    if (!segment.ok()) {
      if (!o.group.empty()) Fail(segment.status().message() + " in " + dir);
      fprintf(stderr, "gpuslice: warning: skipping %s: %s\n",
              GroupSegment::PathFor(dir, name).c_str(), segment.status().message().c_str());
      continue;
    }
    (*segment)->ReapDead();
    reports.push_back(ReadGroupReport(**segment));
  }
  const std::string out = o.json ? StatusJson(reports).dump(2) + "\n" : StatusText(reports);
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
  status->callback([o] { Status(*o); });
}

}  // namespace gpuslice::cli
