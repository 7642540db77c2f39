#include "cli/gpu_commands.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/common_flags.h"
#include "cli/daemon_call.h"
#include "cli/exit_codes.h"
#include "cli/process_lifetime.h"

namespace gpuslice::cli {
namespace {

using json = nlohmann::json;

struct Common {
  DaemonConnector connect;
  std::string socket;
  bool json = false;
};

struct SetOptions {
  Common common;
  std::string ids;
  int64_t lease_s = 0;  // 0: the daemon's default
  bool permanent = false;
  bool no_wait = false;
  std::string holder;
};

void AddCommon(CLI::App* cmd, Common* c, const DaemonConnector& connect) {
  c->connect = connect;
  AddSocketOption(*cmd, c->socket);
  cmd->add_flag("--json", c->json, "Print the daemon's JSON answer");
}

void AddSetOptions(CLI::App* cmd, SetOptions* o, const DaemonConnector& connect) {
  AddCommon(cmd, &o->common, connect);
  cmd->add_option("ids", o->ids, "GPUs: an index, a list (0,2), a UUID, or all")->required();
  auto* lease =
      cmd->add_option("--lease", o->lease_s,
                      "Seconds until the change is reverted (default: the daemon's, 3600)")
          ->check(CLI::Range(int64_t{1}, int64_t{366} * 24 * 3600));
  cmd->add_flag("--permanent", o->permanent, "Never revert this change")->excludes(lease);
  cmd->add_flag("--no-wait", o->no_wait, "Return once queued (HTTP 202)");
  cmd->add_option("--holder", o->holder, "A label for this lease (default: your uid only)");
}

HttpReply Call(const Common& c, const std::string& method, const std::string& target,
               const std::string& body = "") {
  return CallDaemon(c.connect(c.socket, kCommandTimeout), method, target, body);
}

json ParseBody(const HttpReply& r) { return DaemonJson(r); }

// Exits 1 with the daemon's error message unless the request succeeded.
void FailOnError(const HttpReply& r, const json& j) {
  if (r.status < 300) return;
  if (j.contains("results")) return;  // per-GPU results are printed by the caller
  Fail(DaemonError(r, j));
}

void PrintResults(const HttpReply& r, const json& j, const std::string& what) {
  if (r.status == 202) {
    printf("queued %s on GPU %s\n", what.c_str(), j["gpus"].dump().c_str());
    return;
  }
  bool failed = false;
  for (const auto& res : j.value("results", json::array())) {
    if (res.value("ok", false)) {
      printf("GPU %d: %s\n", res["gpu"].get<int>(), what.c_str());
    } else {
      failed = true;
      fprintf(stderr, "GPU %d: %s\n", res["gpu"].get<int>(),
              res["error"].value("message", "failed").c_str());
    }
  }
  if (failed) exit(kExitFailure);
}

void Put(const SetOptions& o, const std::string& setting, json body, const std::string& what) {
  if (o.permanent) body["permanent"] = true;
  if (o.lease_s > 0) body["lease_s"] = o.lease_s;
  if (!o.holder.empty()) body["holder"] = o.holder;
  const std::string target = "/v1/gpus/" + o.ids + "/" + setting + (o.no_wait ? "?wait=false" : "");
  HttpReply r = Call(o.common, "PUT", target, body.dump());
  json j = ParseBody(r);
  if (o.common.json) {
    printf("%s\n", j.dump(2).c_str());
    if (r.status >= 300) exit(kExitFailure);
    return;
  }
  FailOnError(r, j);
  std::string suffix =
      o.permanent ? " (permanent)"
                  : " (lease " + j["lease_s"].dump() + " s, holder " + j.value("holder", "?") + ")";
  PrintResults(r, j, what + suffix);
}

std::string Mib(const json& bytes) { return std::to_string(bytes.get<uint64_t>() >> 20) + "MiB"; }

void PrintGpuTable(const json& j) {
  printf("%-4s %-24s %-20s %-5s %-16s %-14s %-8s %-18s %s\n", "GPU", "NAME", "MEMORY USED/TOTAL",
         "UTIL", "POWER DRAW/LIMIT", "LOCKED CLOCKS", "PERSIST", "COMPUTE MODE", "MPS");
  for (const auto& g : j["gpus"]) {
    char power[32];
    snprintf(power, sizeof power, "%.0fW/%.0fW", g["power"]["draw_watts"].get<double>(),
             g["power"]["limit_watts"].get<double>());
    const json& locked = g["clocks"]["locked_gpu"];
    std::string clocks = locked.is_null() ? "-"
                                          : std::to_string(locked["min_mhz"].get<int>()) + "-" +
                                                std::to_string(locked["max_mhz"].get<int>());
    const std::string memory =
        Mib(g["memory"]["used_bytes"]) + "/" + Mib(g["memory"]["total_bytes"]);
    printf("%-4d %-24s %-20s %3d%%  %-16s %-14s %-8s %-18s %s\n", g["index"].get<int>(),
           g["name"].get<std::string>().substr(0, 24).c_str(), memory.c_str(),
           g["utilization"]["gpu_percent"].get<int>(), power, clocks.c_str(),
           g["persistence"].get<bool>() ? "on" : "off",
           g["compute_mode"].get<std::string>().c_str(), g["mps"].get<std::string>().c_str());
  }
  // What each GPU's node offers for partitioning it (DESIGN.md section 5a).
  printf("\n%-4s %-12s %-10s %-5s %-22s %s\n", "GPU", "DRIVER", "CGROUP V2", "MIG", "MEMORY LIMITS",
         "MPS");
  for (const auto& g : j["gpus"]) {
    const json f = g.value("features", json::object());
    const json mps = f.value("mps", json::object());
    std::string mps_text = "unavailable";
    if (mps.value("available", false) && mps["protocol"].is_number()) {
      mps_text = "v" + std::to_string(mps["protocol"].get<int>());
    } else if (!mps.value("reason", std::string()).empty()) {
      mps_text += " (" + mps.value("reason", std::string()) + ")";
    }
    const std::string driver = f.value("driver_version", std::string());
    // The driver's per-cgroup limits need the API (r615), cgroup v2 and a
    // non-MIG GPU (DESIGN.md section 5a); else the limiter holds memory.
    const bool cgroup_v2 = f.value("cgroup_v2", false);
    const bool mig = f.value("mig", false);
    std::string memory = "limiter";
    if (!f.value("memory_limits", false)) {
      memory += " (pre-r615)";
    } else if (mig) {
      memory += " (MIG)";
    } else if (!cgroup_v2) {
      memory += " (no cgroup v2)";
    } else {
      memory = "driver";
    }
    printf("%-4d %-12s %-10s %-5s %-22s %s\n", g["index"].get<int>(),
           driver.empty() ? "?" : driver.c_str(), cgroup_v2 ? "yes" : "no", mig ? "on" : "off",
           memory.c_str(), mps_text.c_str());
  }
}

// The MIG instances of the GPUs in MIG mode (GET /v1/mig's "gpus"), with the
// group gpusliced made each for ("-": the operator's). Nothing without one.
void PrintMigTable(const json& gpus) {
  bool header = false;
  for (const auto& g : gpus) {
    if (g.value("mode", "") != "enabled") continue;
    if (!header) {
      printf("\n%-4s %-4s %-9s %-9s %-20s %-44s %s\n", "GPU", "GI", "PROFILE", "PLACEMENT",
             "MEMORY USED/TOTAL", "MIG DEVICE", "OWNER");
      header = true;
    }
    for (const auto& m : g.value("instances", json::array())) {
      const std::string placement = std::to_string(m["placement"].value("start", 0)) + "+" +
                                    std::to_string(m["placement"].value("size", 0));
      const std::string uuid = m.value("uuid", "");
      const json used = m.value("memory_used_bytes", json());
      const std::string memory =
          (used.is_number() ? Mib(used) : std::string("-")) + "/" + Mib(m["memory_bytes"]);
      printf("%-4d %-4d %-9s %-9s %-20s %-44s %s\n", g.value("index", 0),
             m.value("gpu_instance_id", 0), m.value("profile", "").c_str(), placement.c_str(),
             memory.c_str(), uuid.empty() ? "-" : uuid.c_str(),
             m["owner"].is_string() ? m["owner"].get<std::string>().c_str() : "-");
    }
  }
}

}  // namespace

void AddGpuCommands(CLI::App& app, const DaemonConnector& connect) {
  CLI::App* gpu = app.add_subcommand("gpu", "GPU status and settings through gpusliced");
  gpu->require_subcommand(1);

  {
    auto* c = ProcessLifetime<Common>();
    auto* ids = ProcessLifetime<std::string>("all");
    CLI::App* cmd = gpu->add_subcommand("list", "Show every GPU (or IDS) as the daemon sees it");
    AddCommon(cmd, c, connect);
    cmd->add_option("ids", *ids, "GPUs: an index, a list, a UUID, or all (default)");
    cmd->callback([c, ids] {
      HttpReply r = Call(*c, "GET", *ids == "all" ? "/v1/gpus" : "/v1/gpus/" + *ids);
      json j = ParseBody(r);
      FailOnError(r, j);
      // MIG instances, where a GPU is in MIG mode (a daemon without the
      // route answers 404: none shown).
      json mig = json::array();
      if (std::ranges::any_of(j["gpus"], [](const json& g) {
            return g.value("features", json::object()).value("mig", false);
          })) {
        HttpReply m = Call(*c, "GET", "/v1/mig");
        const json mj = ParseBody(m);
        if (m.status == 200 && mj.contains("gpus")) {
          for (const auto& g : mj["gpus"]) {
            for (const auto& listed : j["gpus"]) {
              if (listed.value("uuid", "") == g.value("uuid", "")) mig.push_back(g);
            }
          }
        }
      }
      if (c->json) {
        j["mig"] = mig;
        printf("%s\n", j.dump(2).c_str());
      } else {
        PrintGpuTable(j);
        PrintMigTable(mig);
      }
    });
  }
  {
    auto* o = ProcessLifetime<SetOptions>();
    auto* watts = ProcessLifetime<double>(0);
    CLI::App* cmd = gpu->add_subcommand("set-power-limit", "Set the power limit (watts)");
    AddSetOptions(cmd, o, connect);
    cmd->add_option("watts", *watts, "Power limit in watts")
        ->required()
        ->check(CLI::PositiveNumber);
    cmd->callback([o, watts] {
      char what[64];
      snprintf(what, sizeof what, "power limit %g W", *watts);
      Put(*o, "power-limit", {{"watts", *watts}}, what);
    });
  }
  for (const bool memory : {false, true}) {
    auto* o = ProcessLifetime<SetOptions>();
    auto* lo = ProcessLifetime<int>(0);
    auto* hi = ProcessLifetime<int>(0);
    const std::string setting = memory ? "memory-clocks" : "gpu-clocks";
    CLI::App* cmd = gpu->add_subcommand(memory ? "lock-memory-clocks" : "lock-clocks",
                                        memory ? "Lock the memory clock to [MIN, MAX] MHz"
                                               : "Lock the GPU (SM) clock to [MIN, MAX] MHz");
    AddSetOptions(cmd, o, connect);
    cmd->add_option("min_mhz", *lo, "Lowest clock, MHz")->required()->check(CLI::PositiveNumber);
    cmd->add_option("max_mhz", *hi, "Highest clock, MHz")->required()->check(CLI::PositiveNumber);
    cmd->callback([o, lo, hi, setting] {
      Put(*o, setting, {{"min_mhz", *lo}, {"max_mhz", *hi}},
          setting + " locked to " + std::to_string(*lo) + "-" + std::to_string(*hi) + " MHz");
    });
    auto* r = ProcessLifetime<SetOptions>();
    CLI::App* reset =
        gpu->add_subcommand(memory ? "reset-memory-clocks" : "reset-clocks",
                            memory ? "Unlock the memory clock (leased like any setting)"
                                   : "Unlock the GPU clock (leased like any setting)");
    AddSetOptions(reset, r, connect);
    reset->callback([r, setting] { Put(*r, setting, {{"reset", true}}, setting + " unlocked"); });
  }
  {
    auto* o = ProcessLifetime<SetOptions>();
    auto* state = ProcessLifetime<std::string>();
    CLI::App* cmd = gpu->add_subcommand("persistence", "Turn persistence mode on or off");
    AddSetOptions(cmd, o, connect);
    cmd->add_option("state", *state, "on or off")->required()->check(CLI::IsMember({"on", "off"}));
    cmd->callback([o, state] {
      Put(*o, "persistence", {{"enabled", *state == "on"}}, "persistence " + *state);
    });
  }
  {
    auto* o = ProcessLifetime<SetOptions>();
    auto* mode = ProcessLifetime<std::string>();
    CLI::App* cmd = gpu->add_subcommand("compute-mode", "Set the compute mode");
    AddSetOptions(cmd, o, connect);
    cmd->add_option("mode", *mode, "DEFAULT, EXCLUSIVE_PROCESS or PROHIBITED")
        ->required()
        ->check(CLI::IsMember({"DEFAULT", "EXCLUSIVE_PROCESS", "PROHIBITED"}));
    cmd->callback([o, mode] {
      Put(*o, "compute-mode", {{"mode", *mode}}, "compute mode " + *mode);
    });
  }
  {
    auto* c = ProcessLifetime<Common>();
    auto* ids = ProcessLifetime<std::string>();
    CLI::App* cmd = gpu->add_subcommand("energy", "Total energy and instant power");
    AddCommon(cmd, c, connect);
    cmd->add_option("ids", *ids, "GPUs: an index, a list, a UUID, or all")->required();
    cmd->callback([c, ids] {
      HttpReply r = Call(*c, "GET", "/v1/gpus/" + *ids + "/energy");
      json j = ParseBody(r);
      FailOnError(r, j);
      if (c->json) {
        printf("%s\n", j.dump(2).c_str());
        return;
      }
      printf("%-4s %-16s %s\n", "GPU", "ENERGY (J)", "POWER (W)");
      for (const auto& g : j["gpus"]) {
        printf("%-4d %-16.3f %.1f\n", g["index"].get<int>(), g["energy_joules"].get<double>(),
               g["power_watts"].get<double>());
      }
    });
  }
  {
    auto* c = ProcessLifetime<Common>();
    auto* ids = ProcessLifetime<std::string>();
    auto* setting = ProcessLifetime<std::string>();
    auto* holder = ProcessLifetime<std::string>();
    CLI::App* cmd = gpu->add_subcommand("release", "End your lease of a setting; it is reverted");
    AddCommon(cmd, c, connect);
    cmd->add_option("ids", *ids, "GPUs: an index, a list, a UUID, or all")->required();
    cmd->add_option("setting", *setting,
                    "power-limit, gpu-clocks, memory-clocks, persistence or compute-mode")
        ->required();
    cmd->add_option("--holder", *holder, "The label the lease was taken with");
    cmd->callback([c, ids, setting, holder] {
      HttpReply r =
          Call(*c, "DELETE",
               "/v1/gpus/" + *ids + "/" + *setting + (holder->empty() ? "" : "?holder=" + *holder));
      json j = ParseBody(r);
      if (c->json) {
        printf("%s\n", j.dump(2).c_str());
        if (r.status >= 300) exit(kExitFailure);
        return;
      }
      FailOnError(r, j);
      PrintResults(r, j, *setting + " released");
    });
  }
  {
    auto* c = ProcessLifetime<Common>();
    CLI::App* cmd = gpu->add_subcommand("leases", "Show the settings held under leases");
    AddCommon(cmd, c, connect);
    cmd->callback([c] {
      HttpReply r = Call(*c, "GET", "/v1/leases");
      json j = ParseBody(r);
      FailOnError(r, j);
      if (c->json) {
        printf("%s\n", j.dump(2).c_str());
        return;
      }
      printf("%-4s %-14s %-22s %-24s %-10s %s\n", "GPU", "SETTING", "HOLDER", "VALUE", "EFFECTIVE",
             "EXPIRES IN");
      for (const auto& l : j["leases"]) {
        printf("%-4d %-14s %-22s %-24s %-10s %s\n", l["gpu"].get<int>(),
               l["setting"].get<std::string>().c_str(), l["holder"].get<std::string>().c_str(),
               l["value"].dump().c_str(), l["effective"].get<bool>() ? "yes" : "no",
               l["expires_in_s"].is_null() ? "never" : (l["expires_in_s"].dump() + " s").c_str());
      }
    });
  }
}

}  // namespace gpuslice::cli
