#include "cli/registry_commands.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/daemon_call.h"
#include "cli/exit_codes.h"
#include "cli/flag_checks.h"
#include "cli/limit_flags.h"
#include "cli/registry_view.h"

namespace gpuslice::cli {
namespace {

using json = nlohmann::json;

struct Options {
  std::string socket;
  bool json = false;
  std::string group;
  std::string memory;   // as typed; "" if not given
  std::string compute;  // as typed; "" if not given
  std::string tier;
};

void AddSocket(CLI::App* cmd, Options* o) {
  cmd->add_option("--socket", o->socket,
                  "Daemon socket (default: $GPUSLICE_SOCKET or /run/gpuslice/gpusliced.sock)");
}

void AddJson(CLI::App* cmd, Options* o) {
  cmd->add_flag("--json", o->json, "Print the daemon's JSON answer");
}

// The answer's JSON, or exits 1 with the daemon's message.
json Expect(const HttpResponse& r, int status = 200) {
  json j = DaemonJson(r);
  if (r.status != status) Fail(DaemonError(r, j));
  return j;
}

void Tenants(const Options& o) {
  const std::string target = o.group.empty() ? "/v1/tenants" : "/v1/tenants?group=" + o.group;
  json j = Expect(CallDaemon(o.socket, "GET", target));
  fputs(o.json ? (j.dump(2) + "\n").c_str() : TenantsText(j).c_str(), stdout);
}

void Show(const Options& o) {
  json groups;
  json answer;
  if (o.group.empty()) {
    answer = Expect(CallDaemon(o.socket, "GET", "/v1/groups"));
    groups = answer.value("groups", json::array());
  } else {
    answer = Expect(CallDaemon(o.socket, "GET", "/v1/groups/" + o.group));
    groups = json::array({answer});
  }
  fputs(o.json ? (answer.dump(2) + "\n").c_str() : GroupsText(groups).c_str(), stdout);
}

// GPU UUIDs by index, as the daemon numbers them.
std::vector<std::string> GpuUuids(const Options& o) {
  json j = Expect(CallDaemon(o.socket, "GET", "/v1/gpus"));
  std::vector<std::string> uuids;
  for (const json& g : j.value("gpus", json::array())) uuids.push_back(g.value("uuid", ""));
  return uuids;
}

void Set(const Options& o) {
  if (o.memory.empty() && o.compute.empty() && o.tier.empty()) {
    Fail("group set: give --memory, --compute, --tier or several", kExitUsage);
  }
  GroupSetFlags flags;
  if (!o.memory.empty()) flags.memory = *MemoryLimitsByDevice(o.memory);  // checked by CLI11
  if (!o.compute.empty()) flags.compute = *ComputeLimitsByDevice(o.compute);
  flags.tier = o.tier;
  // PUT replaces the limits: start from the group's current ones.
  const HttpResponse current = CallDaemon(o.socket, "GET", "/v1/groups/" + o.group);
  json limits = json::object();
  if (current.status == 200) {
    limits = DaemonJson(current).value("limits", json::object());
  } else if (current.status != 404) {
    Fail(DaemonError(current, DaemonJson(current)));
  }
  bool per_device = false;
  for (const auto& [device, value] : flags.memory) per_device = per_device || !device.empty();
  for (const auto& [device, value] : flags.compute) per_device = per_device || !device.empty();
  auto body = GroupPutBody(limits, flags, per_device ? GpuUuids(o) : std::vector<std::string>{});
  if (!body.ok()) Fail(body.status().message(), kExitUsage);
  json j = Expect(CallDaemon(o.socket, "PUT", "/v1/groups/" + o.group, body->dump()));
  if (o.json) {
    printf("%s\n", j.dump(2).c_str());
    return;
  }
  // Show the result as `group show G` does.
  json view = Expect(CallDaemon(o.socket, "GET", "/v1/groups/" + o.group));
  fputs(GroupsText(json::array({view})).c_str(), stdout);
}

void Forget(const Options& o) {
  const HttpResponse r = CallDaemon(o.socket, "DELETE", "/v1/groups/" + o.group);
  json j = DaemonJson(r);
  if (r.status == 409) {
    std::string pids;
    const HttpResponse g = CallDaemon(o.socket, "GET", "/v1/groups/" + o.group);
    if (g.status == 200) {
      for (const json& pid : DaemonJson(g).value("members", json::array())) {
        pids += (pids.empty() ? "" : ", ") + pid.dump();
      }
    }
    Fail("group " + o.group +
         " still has members: " + (pids.empty() ? DaemonError(r, j) : "host pid(s) " + pids) +
         " (it can be forgotten once they exit)");
  }
  if (r.status != 200) Fail(DaemonError(r, j));
  printf("group %s forgotten\n", o.group.c_str());
}

}  // namespace

void AddRegistryCommands(CLI::App& app) {
  {
    auto* o = new Options;  // lives as long as the process: CLI11 keeps pointers
    CLI::App* cmd = app.add_subcommand("tenants", "Show the processes registered with gpusliced");
    AddSocket(cmd, o);
    AddJson(cmd, o);
    cmd->add_option("--group", o->group, "Only this group's tenants")->check(GroupIdCheck());
    cmd->callback([o] { Tenants(*o); });
  }
  CLI::App* group = app.add_subcommand("group", "Groups as gpusliced's registry knows them");
  group->require_subcommand(1);
  {
    auto* o = new Options;
    CLI::App* cmd = group->add_subcommand(
        "show", "Show every group (or G): limits per GPU, tier, owner, member count");
    AddSocket(cmd, o);
    AddJson(cmd, o);
    cmd->add_option("group", o->group, "The group (default: every group)")->check(GroupIdCheck());
    cmd->callback([o] { Show(*o); });
  }
  {
    auto* o = new Options;
    CLI::App* cmd = group->add_subcommand(
        "set", "Set a group's limits or tier (creates it); root or the admin group only");
    AddSocket(cmd, o);
    AddJson(cmd, o);
    cmd->add_option("group", o->group, "The group")->required()->check(GroupIdCheck());
    cmd->add_option("--memory", o->memory,
                    "Memory limit for every GPU (4GiB, unlimited) or per GPU (0=4GiB,1=2GiB)")
        ->check(CheckedBy(MemoryLimitsByDevice, "QUANTITY|DEV=QUANTITY,..."));
    cmd->add_option("--compute", o->compute,
                    "Compute limit, percent 1-100 (100: unlimited), for every GPU or per GPU "
                    "(0=50,1=30)")
        ->check(CheckedBy(ComputeLimitsByDevice, "PERCENT|DEV=PERCENT,..."));
    cmd->add_option("--tier", o->tier, "Isolation tier")->check(CLI::IsMember({"shared", "mps"}));
    cmd->callback([o] { Set(*o); });
  }
  {
    auto* o = new Options;
    CLI::App* cmd =
        group->add_subcommand("forget", "Forget a group with no live member; admins only");
    AddSocket(cmd, o);
    cmd->add_option("group", o->group, "The group")->required()->check(GroupIdCheck());
    cmd->callback([o] { Forget(*o); });
  }
}

}  // namespace gpuslice::cli
