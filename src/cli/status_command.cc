#include "cli/status_command.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/common_flags.h"
#include "cli/daemon_client.h"
#include "cli/exit_codes.h"
#include "cli/flag_checks.h"
#include "cli/group_report.h"
#include "cli/paths.h"
#include "cli/process_lifetime.h"
#include "cli/registry_view.h"
#include "common/clock.h"
#include "shm/group_segment.h"
#include "shm/segment_dirs.h"

namespace gpuslice::cli {
namespace {

struct StatusOptions {
  std::string shm_dir;
  std::string group;
  bool json = false;
  bool all = false;
  bool gc = false;
  int64_t gc_grace_s = kDefaultGroupGcGraceS;
  bool no_daemon = false;
  std::string socket;
  DaemonConnector connect;
};

// How long `status` waits for the daemon before showing segments only.
constexpr std::chrono::milliseconds kDaemonTimeout{300};

// The registry's groups, or why the daemon did not give them.
StatusOr<std::vector<RegistryGroup>> AskRegistry(const DaemonClient& client) {
  auto tenants = client.GetJson("/v1/tenants");
  if (!tenants.ok()) return tenants.status();
  auto groups = client.GetJson("/v1/groups");
  if (!groups.ok()) return groups.status();
  return ParseRegistry(*tenants, *groups);
}

// Removes the segments of `names` that nobody is attached to and that have
// been idle for the grace period; returns the names that are left.
std::vector<std::string> Collect(const std::string& dir, std::vector<std::string> names,
                                 int64_t grace_s) {
  std::vector<std::string> kept;
  for (std::string& name : names) {
    auto removed = GroupSegment::RemoveIfAbandoned(SegmentDirOf(dir, name), name,
                                                   grace_s * 1'000'000'000, MonotonicNs());
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
    names = ListAllGroups(dir);  // claims' own directories too (segment_dirs.h)
  } else {
    names.push_back(o.group);
  }
  if (o.gc) names = Collect(dir, std::move(names), o.gc_grace_s);
  DaemonView daemon;
  std::vector<RegistryGroup> registry;
  if (!o.no_daemon) {
    daemon.used = true;
    daemon.socket = DaemonSocket(o.socket);
    auto r = AskRegistry(o.connect(o.socket, kDaemonTimeout));
    daemon.answered = r.ok();
    if (r.ok()) {
      registry = std::move(*r);
      if (!o.group.empty()) {
        std::erase_if(registry, [&](const RegistryGroup& g) { return g.id != o.group; });
      }
    } else {
      daemon.error = r.status().message();
      struct stat st {};
      daemon.socket_exists = stat(daemon.socket.c_str(), &st) == 0;
    }
  }
  const bool registry_has_group = std::any_of(
      registry.begin(), registry.end(), [&](const RegistryGroup& g) { return g.id == o.group; });
  std::vector<GroupReport> reports;
  int hidden = 0;
  int not_ours = 0;
  for (const std::string& name : names) {
    const std::string seg_dir = SegmentDirOf(dir, name);
    auto segment = GroupSegment::Open(seg_dir, name, /*create=*/false);
    if (!segment.ok()) {
      if (!o.group.empty() && registry_has_group) continue;  // shown from the registry
      if (!o.group.empty()) Fail(segment.status().message() + " in " + seg_dir);
      if (segment.status().code() == StatusCode::kPermissionDenied) {
        ++not_ours;  // another user's group: not an error, and not shown
        continue;
      }
      fprintf(stderr, "gpuslice: warning: skipping %s: %s\n",
              GroupSegment::PathFor(seg_dir, name).c_str(), segment.status().message().c_str());
      continue;
    }
    (*segment)->ReapDead();
    reports.push_back(ReadGroupReport(**segment, MonotonicNs()));
  }
  daemon.registry_only = MergeRegistry(std::move(registry), reports);
  // Idle: no process attached and no tenant registered.
  const auto idle = [&](const GroupReport& g) {
    return !g.live && !(g.registry && !g.registry->tenants.empty());
  };
  if (!o.all && o.group.empty()) {
    hidden = static_cast<int>(std::count_if(reports.begin(), reports.end(), idle));
    std::erase_if(reports, idle);
    std::erase_if(daemon.registry_only, [](const RegistryGroup& g) { return g.tenants.empty(); });
  }
  std::string out =
      o.json ? StatusJson(reports, daemon).dump(2) + "\n" : StatusText(reports, daemon);
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

void AddStatusCommand(CLI::App& app, const DaemonConnector& connect) {
  auto* o = ProcessLifetime<StatusOptions>();  // CLI11 keeps pointers (process_lifetime.h)
  o->connect = connect;
  CLI::App* status = app.add_subcommand(
      "status", "Show each group's devices, limits, memory in use and live members");
  AddShmDirOption(*status, o->shm_dir);
  status->add_option("--group", o->group, "Show only this group")->check(GroupIdCheck());
  status->add_flag("--json", o->json, "Machine-readable output (fields documented in docs/cli.md)");
  status->add_flag("--all", o->all,
                   "Also show idle groups (no process attached; shown with their idle time)");
  status->add_flag("--gc", o->gc, "First remove idle groups' segments older than --gc-grace-s");
  status
      ->add_option("--gc-grace-s", o->gc_grace_s,
                   "Idle time after which --gc removes a group (seconds, default 600)")
      ->check(CLI::NonNegativeNumber);
  status->add_flag("--no-daemon", o->no_daemon,
                   "Read the segments only; do not ask gpusliced for its registry");
  AddSocketOption(*status, o->socket);
  status->callback([o] { Status(*o); });
}

}  // namespace gpuslice::cli
