#include "cli/registry_commands.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/common_flags.h"
#include "cli/daemon_call.h"
#include "cli/exit_codes.h"
#include "cli/flag_checks.h"
#include "cli/limit_flags.h"
#include "cli/process_lifetime.h"
#include "cli/registry_view.h"

namespace gpuslice::cli {
namespace {

using json = nlohmann::json;

struct Options {
  DaemonConnector connect;
  std::string socket;
  bool json = false;
  std::string group;
  std::string memory;   // as typed; "" if not given
  std::string compute;  // as typed; "" if not given
  std::string limit;    // --limit: the same as --compute
  std::string tier;
  std::string gpu;  // --gpu: the one GPU (index or UUID) the values are for; "" every GPU
  std::optional<uint32_t> request;
  std::string priority;
  std::optional<uint32_t> weight;
};

void AddSocket(CLI::App* cmd, Options* o, const DaemonConnector& connect) {
  o->connect = connect;
  AddSocketOption(*cmd, o->socket);
}

void AddJson(CLI::App* cmd, Options* o) {
  cmd->add_flag("--json", o->json, "Print the daemon's JSON answer");
}

HttpReply Ask(const Options& o, const std::string& method, const std::string& target,
              const std::string& body = "") {
  return CallDaemon(o.connect(o.socket, kCommandTimeout), method, target, body);
}

// The answer's JSON, or exits 1 with the daemon's message.
json Expect(const HttpReply& r, int status = 200) {
  json j = DaemonJson(r);
  if (r.status != status) Fail(DaemonError(r, j));
  return j;
}

// As Expect, for a change of a group's settings: a refusal for the state of
// the node (409, e.g. request_overcommit) exits kExitConflict, a value the
// daemon rejects (400) kExitRejected, each with the daemon's message.
json ExpectChange(const HttpReply& r, const std::string& what) {
  json j = DaemonJson(r);
  if (r.status == 200) return j;
  const std::string message = what + ": " + DaemonError(r, j);
  if (r.status == 409) Fail(message, kExitConflict);
  if (r.status == 400) Fail(message, kExitRejected);
  Fail(message);
}

void Tenants(const Options& o) {
  const std::string target = o.group.empty() ? "/v1/tenants" : "/v1/tenants?group=" + o.group;
  json j = Expect(Ask(o, "GET", target));
  fputs(o.json ? (j.dump(2) + "\n").c_str() : TenantsText(j).c_str(), stdout);
}

void Show(const Options& o) {
  json groups;
  json answer;
  if (o.group.empty()) {
    answer = Expect(Ask(o, "GET", "/v1/groups"));
    groups = answer.value("groups", json::array());
  } else {
    answer = Expect(Ask(o, "GET", "/v1/groups/" + o.group));
    groups = json::array({answer});
  }
  fputs(o.json ? (answer.dump(2) + "\n").c_str() : GroupsText(groups).c_str(), stdout);
}

// GPU UUIDs by index, as the daemon numbers them.
std::vector<std::string> GpuUuids(const Options& o) {
  json j = Expect(Ask(o, "GET", "/v1/gpus"));
  std::vector<std::string> uuids;
  for (const json& g : j.value("gpus", json::array())) uuids.push_back(g.value("uuid", ""));
  return uuids;
}

// A flag's (device, value) pairs: `pairs` as parsed, moved to --gpu's GPU
// when it is given (then the value must be one for every GPU).
template <typename T>
std::vector<std::pair<std::string, T>> OnGpu(std::vector<std::pair<std::string, T>> pairs,
                                             const Options& o, const char* flag) {
  if (o.gpu.empty()) return pairs;
  for (auto& [device, value] : pairs) {
    if (!device.empty()) {
      Fail(std::string("group set: --gpu and DEVICE=VALUE in ") + flag + " are exclusive",
           kExitUsage);
    }
    device = o.gpu;
  }
  return pairs;
}

void Set(const Options& o) {
  if (o.memory.empty() && o.compute.empty() && o.limit.empty() && o.tier.empty() && !o.request &&
      o.priority.empty() && !o.weight) {
    Fail(
        "group set: give --memory, --compute (--limit), --tier, --request, --priority, --weight "
        "or several",
        kExitUsage);
  }
  if (!o.compute.empty() && !o.limit.empty()) {
    Fail("group set: --limit is --compute; give one of them", kExitUsage);
  }
  GroupSetFlags flags;
  const std::string& compute = o.compute.empty() ? o.limit : o.compute;
  // Checked by CLI11 (CheckedBy) before the callback runs.
  if (!o.memory.empty()) flags.memory = OnGpu(*MemoryLimitsByDevice(o.memory), o, "--memory");
  if (!compute.empty()) flags.compute = OnGpu(*ComputeLimitsByDevice(compute), o, "--compute");
  flags.tier = o.tier;
  if (o.request) flags.request = {{o.gpu, *o.request}};
  if (!o.priority.empty()) flags.priority = {{o.gpu, o.priority}};
  if (o.weight) flags.weight = {{o.gpu, *o.weight}};
  // PUT replaces the limits and the schedule: start from the group's current ones.
  const HttpReply current = Ask(o, "GET", "/v1/groups/" + o.group);
  json limits = json::object();
  json schedule = json::object();
  if (current.status == 200) {
    const json group = DaemonJson(current);
    limits = group.value("limits", json::object());
    schedule = group.value("schedule", json::object());
  } else if (current.status != 404) {
    Fail(DaemonError(current, DaemonJson(current)));
  }
  bool per_device = !o.gpu.empty();
  for (const auto& [device, value] : flags.memory) per_device = per_device || !device.empty();
  for (const auto& [device, value] : flags.compute) per_device = per_device || !device.empty();
  const std::vector<std::string> uuids = per_device ? GpuUuids(o) : std::vector<std::string>{};
  auto body = GroupPutBody(limits, flags, uuids);
  if (!body.ok()) Fail(body.status().message(), kExitUsage);
  if (flags.HasSchedule()) {
    auto s = GroupScheduleBody(schedule, flags, uuids);
    if (!s.ok()) Fail(s.status().message(), kExitUsage);
    (*body)["schedule"] = *s;
  }
  json j =
      ExpectChange(Ask(o, "PUT", "/v1/groups/" + o.group, body->dump()), "group set " + o.group);
  if (o.json) {
    printf("%s\n", j.dump(2).c_str());
    return;
  }
  // Show the result as `group show G` does.
  json view = Expect(Ask(o, "GET", "/v1/groups/" + o.group));
  fputs(GroupsText(json::array({view})).c_str(), stdout);
}

// `group pause G` / `group resume G`.
void Pause(const Options& o, bool pause) {
  const char* verb = pause ? "pause" : "resume";
  json j = ExpectChange(Ask(o, "POST", "/v1/groups/" + o.group + "/" + verb),
                        std::string("group ") + verb + " " + o.group);
  if (o.json) {
    printf("%s\n", j.dump(2).c_str());
    return;
  }
  printf("group %s %s\n", o.group.c_str(), pause ? "paused" : "resumed");
}

void Forget(const Options& o) {
  const HttpReply r = Ask(o, "DELETE", "/v1/groups/" + o.group);
  json j = DaemonJson(r);
  if (r.status == 409) {
    std::string pids;
    const HttpReply g = Ask(o, "GET", "/v1/groups/" + o.group);
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

void AddRegistryCommands(CLI::App& app, const DaemonConnector& connect) {
  {
    auto* o = ProcessLifetime<Options>();  // CLI11 keeps pointers (process_lifetime.h)
    CLI::App* cmd = app.add_subcommand("tenants", "Show the processes registered with gpusliced");
    AddSocket(cmd, o, connect);
    AddJson(cmd, o);
    cmd->add_option("--group", o->group, "Only this group's tenants")->check(GroupIdCheck());
    cmd->callback([o] { Tenants(*o); });
  }
  CLI::App* group = app.add_subcommand("group", "Groups as gpusliced's registry knows them");
  group->require_subcommand(1);
  {
    auto* o = ProcessLifetime<Options>();
    CLI::App* cmd = group->add_subcommand(
        "show", "Show every group (or G): limits per GPU, tier, owner, member count");
    AddSocket(cmd, o, connect);
    AddJson(cmd, o);
    cmd->add_option("group", o->group, "The group (default: every group)")->check(GroupIdCheck());
    cmd->callback([o] { Show(*o); });
  }
  {
    auto* o = ProcessLifetime<Options>();
    CLI::App* cmd = group->add_subcommand(
        "set", "Set a group's limits, tier or schedule (creates it); root or the admin group only");
    AddSocket(cmd, o, connect);
    AddJson(cmd, o);
    cmd->add_option("group", o->group, "The group")->required()->check(GroupIdCheck());
    cmd->add_option("--memory", o->memory,
                    "Memory limit for every GPU (4GiB, unlimited) or per GPU (0=4GiB,1=2GiB)")
        ->check(CheckedBy(MemoryLimitsByDevice, "QUANTITY|DEV=QUANTITY,..."));
    cmd->add_option("--compute", o->compute,
                    "Compute limit, percent 1-100 (100: unlimited), for every GPU or per GPU "
                    "(0=50,1=30)")
        ->check(CheckedBy(ComputeLimitsByDevice, "PERCENT|DEV=PERCENT,..."));
    cmd->add_option("--limit", o->limit, "The compute limit: the same as --compute")
        ->check(CheckedBy(ComputeLimitsByDevice, "PERCENT|DEV=PERCENT,..."));
    cmd->add_option("--tier", o->tier, "Isolation tier")
        ->check(CLI::IsMember({"shared", "mps", "mig"}));
    cmd->add_option("--gpu", o->gpu,
                    "The GPU (index or UUID) the values are for (default: every GPU)");
    cmd->add_option("--request", o->request,
                    "Compute share guaranteed whenever the group wants it, percent 0-100; the "
                    "requests on a GPU sum to at most 100")
        ->check(CLI::Range(0, 100));
    cmd->add_option("--priority", o->priority,
                    "latency: its kernels do not wait behind batch groups' queues")
        ->check(CLI::IsMember({"latency", "batch"}));
    cmd->add_option("--weight", o->weight, "Share of the surplus, 1-1000 (default 1)")
        ->check(CLI::Range(1, 1000));
    cmd->callback([o] { Set(*o); });
  }
  for (const bool pause : {true, false}) {
    auto* o = ProcessLifetime<Options>();
    CLI::App* cmd = group->add_subcommand(
        pause ? "pause" : "resume",
        pause ? "Pause a group: its launches wait, its memory is kept, its share is lent; "
                "admins only"
              : "Resume a paused group; admins only");
    AddSocket(cmd, o, connect);
    AddJson(cmd, o);
    cmd->add_option("group", o->group, "The group")->required()->check(GroupIdCheck());
    cmd->callback([o, pause] { Pause(*o, pause); });
  }
  {
    auto* o = ProcessLifetime<Options>();
    CLI::App* cmd =
        group->add_subcommand("forget", "Forget a group with no live member; admins only");
    AddSocket(cmd, o, connect);
    cmd->add_option("group", o->group, "The group")->required()->check(GroupIdCheck());
    cmd->callback([o] { Forget(*o); });
  }
}

}  // namespace gpuslice::cli
