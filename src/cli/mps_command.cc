#include "cli/mps_command.h"

#include <cctype>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli/common_flags.h"
#include "cli/exit_codes.h"
#include "common/quantity.h"

namespace gpuslice::cli {
namespace {

using json = nlohmann::json;

struct MpsOptions {
  std::string tenant;
  std::string gpus;
  std::optional<uint32_t> threads;
  std::string pinned_memory;
  std::optional<int> priority;
  std::string gpu;
  int64_t pid = 0;
  bool json = false;
  bool env = false;
  std::string socket;  // --socket; "" the default
};

// A command's run: the call, the output and the way out.
class MpsRun {
 public:
  MpsRun(const DaemonClient& client, const MpsCliIo& io) : client_(client), io_(io) {}

  // The reply body as JSON, or nullopt after reporting why there is none.
  std::optional<json> Request(std::string_view method, const std::string& path,
                              const std::string& body) {
    auto reply = client_.Request(std::string(method), path, body);
    if (!reply.ok()) {
      Fail("cannot reach gpusliced: " + reply.status().message());
      return std::nullopt;
    }
    json parsed = json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
    if (reply->status < 200 || reply->status >= 300) {
      const bool has_message = parsed.is_object() && parsed.contains("error") &&
                               parsed["error"].is_object() &&
                               parsed["error"].value("message", json()).is_string();
      Fail(has_message ? parsed["error"]["message"].get<std::string>()
                       : "gpusliced answered " + std::to_string(reply->status) + " to " +
                             std::string(method) + " " + path);
      return std::nullopt;
    }
    if (parsed.is_discarded() || !parsed.is_object()) {
      Fail("gpusliced answered " + path + " with something that is not a JSON object");
      return std::nullopt;
    }
    return parsed;
  }

  void Fail(const std::string& message, int code = kExitFailure) {
    *io_.err << "gpuslice: " << message << "\n";
    io_.exit(code);
  }

  std::ostream& out() { return *io_.out; }

 private:
  const DaemonClient& client_;
  const MpsCliIo& io_;
};

// Single-quoted for a POSIX shell.
std::string ShellQuote(const std::string& value) {
  std::string quoted = "'";
  for (char c : value) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

std::string Text(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "-";
  return value.dump();
}

std::string Join(const json& array) {
  std::string joined;
  for (const json& item : array) joined += (joined.empty() ? "" : ",") + Text(item);
  return joined.empty() ? "-" : joined;
}

// The settings fields of a request body.
json SettingsBody(const MpsOptions& o) {
  json body = json::object();
  if (o.threads) body["active_thread_percentage"] = *o.threads;
  if (!o.pinned_memory.empty()) body["pinned_memory_limit"] = o.pinned_memory;
  if (o.priority) body["client_priority"] = *o.priority;
  return body;
}

void PrintEnvironment(std::ostream& out, const json& reply, bool exports_only) {
  const json env = reply.value("env", json::object());
  if (exports_only) {
    for (const auto& [name, value] : env.items()) {
      out << "export " << name << "=" << ShellQuote(Text(value)) << "\n";
    }
    return;
  }
  out << "tenant " << Text(reply.value("tenant", json())) << ": tier "
      << Text(reply.value("tier", json()));
  if (reply.contains("reason")) out << " (" << Text(reply["reason"]) << ")";
  out << "\n";
  const json gpus = reply.value("gpus", json::array());
  if (reply.value("tier", "") == "mps" && gpus.size() > 1) {
    out << "  one process per GPU; the environment of each:\n";
    for (const json& gpu : gpus) {
      out << "  GPU " << Text(gpu.value("index", json())) << " (" << Text(gpu.value("uuid", json()))
          << "):\n";
      const json gpu_env = gpu.value("env", json::object());
      for (const auto& [name, value] : gpu_env.items()) {
        out << "    " << name << "=" << Text(value) << "\n";
      }
    }
    return;
  }
  for (const auto& [name, value] : env.items()) {
    out << "  " << name << "=" << Text(value) << "\n";
  }
}

void Status(MpsRun& run, const MpsOptions& o) {
  auto status = run.Request("GET", "/v1/mps", "");
  if (!status) return;
  auto tenants = run.Request("GET", "/v1/mps/tenants", "");
  if (!tenants) return;
  std::ostream& out = run.out();
  if (o.json) {
    json combined = *status;
    combined["tenants"] = tenants->value("tenants", json::array());
    out << combined.dump(2) << "\n";
    return;
  }
  if (status->value("available", false)) {
    out << "MPS: available (control " << Text(status->value("control_binary", json())) << ", root "
        << Text(status->value("root", json())) << ")\n";
  } else {
    out << "MPS: unavailable: " << Text(status->value("reason", json()))
        << "; tenants get the shared tier\n";
  }
  const json gpus = status->value("gpus", json::array());
  if (gpus.empty()) {
    out << "no MPS daemons running\n";
  } else {
    out << std::left << std::setw(5) << "GPU" << std::setw(42) << "UUID" << std::setw(9) << "PID"
        << std::setw(11) << "HEALTH" << std::setw(10) << "RESTARTS"
        << "TENANTS\n";
    for (const json& g : gpus) {
      const bool running = g.value("running", false);
      out << std::left << std::setw(5) << Text(g.value("index", json())) << std::setw(42)
          << Text(g.value("uuid", json())) << std::setw(9)
          << (running ? Text(g.value("control_pid", json())) : "-") << std::setw(11)
          << Text(g.value("health", json())) << std::setw(10) << Text(g.value("restarts", json()))
          << Join(g.value("tenants", json::array())) << "\n";
      if (g.contains("last_error")) out << "     last error: " << Text(g["last_error"]) << "\n";
      // MPS v3 static SM partitions (docs/mps.md "SM partitions").
      const json partitions = g.value("sm_partitions", json::object());
      if (partitions.is_object() && !partitions.empty()) {
        out << "     SM partitions:";
        std::string sep = " ";
        for (const auto& [tenant, sms] : partitions.items()) {
          out << sep << tenant << " " << Text(sms) << " SMs";
          sep = ", ";
        }
        out << "\n";
      }
    }
  }
  const json list = tenants->value("tenants", json::array());
  if (list.empty()) {
    out << "no tenants\n";
    return;
  }
  out << std::left << std::setw(20) << "TENANT" << std::setw(8) << "TIER" << std::setw(8) << "GPUS"
      << std::setw(9) << "THREADS" << std::setw(14) << "PINNED MEMORY"
      << "PRIORITY\n";
  for (const json& t : list) {
    const json s = t.value("settings", json::object());
    const std::string threads =
        s.contains("active_thread_percentage") ? Text(s["active_thread_percentage"]) + "%" : "-";
    const std::string pinned =
        s.contains("pinned_memory_limit") && s["pinned_memory_limit"].is_number_unsigned()
            ? FormatBytes(s["pinned_memory_limit"].get<uint64_t>())
            : "-";
    out << std::left << std::setw(20) << Text(t.value("name", json())) << std::setw(8)
        << Text(t.value("tier", json())) << std::setw(8) << Join(t.value("gpus", json::array()))
        << std::setw(9) << threads << std::setw(14) << pinned
        << (s.contains("client_priority") ? Text(s["client_priority"]) : "-") << "\n";
    if (t.contains("reason")) out << "  " << Text(t["reason"]) << "\n";
  }
}

void Acquire(MpsRun& run, const MpsOptions& o) {
  json body = SettingsBody(o);
  body["tenant"] = o.tenant;
  body["gpus"] = o.gpus;
  auto reply = run.Request("POST", "/v1/mps/acquire", body.dump());
  if (!reply) return;
  if (o.json) {
    run.out() << reply->dump(2) << "\n";
  } else {
    PrintEnvironment(run.out(), *reply, o.env);
  }
}

void Release(MpsRun& run, const MpsOptions& o) {
  auto reply = run.Request("POST", "/v1/mps/release", json{{"tenant", o.tenant}}.dump());
  if (!reply) return;
  if (o.json) {
    run.out() << reply->dump(2) << "\n";
  } else {
    run.out() << "tenant " << o.tenant << " released\n";
  }
}

void Set(MpsRun& run, const MpsOptions& o) {
  const json body = SettingsBody(o);
  if (body.empty()) {
    run.Fail("mps set: give --threads, --pinned-memory or --priority", kExitUsage);
    return;
  }
  auto reply = run.Request("POST", "/v1/mps/tenants/" + o.tenant + "/settings", body.dump());
  if (!reply) return;
  if (o.json) {
    run.out() << reply->dump(2) << "\n";
    return;
  }
  if (!o.env) run.out() << "settings apply to processes started from now on\n";
  PrintEnvironment(run.out(), *reply, o.env);
}

void Terminate(MpsRun& run, const MpsOptions& o) {
  const json body = {{"gpu", o.gpu}, {"client_pid", o.pid}};
  auto reply = run.Request("POST", "/v1/mps/terminate", body.dump());
  if (!reply) return;
  if (o.json) {
    run.out() << reply->dump(2) << "\n";
  } else {
    run.out() << "terminated MPS client " << o.pid << " on GPU " << o.gpu << "\n";
  }
}

// Tenant names as the daemon takes them (they also go into URL paths).
CLI::Validator TenantCheck() {
  return {[](std::string& name) -> std::string {
            bool ok = !name.empty() && name.size() <= 100 && name.front() != '.';
            for (char c : name) {
              ok = ok &&
                   (isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
            }
            return ok ? ""
                      : "'" + name +
                            "' is not a tenant name (1-100 characters of A-Z a-z 0-9 . _ -, "
                            "not starting with '.')";
          },
          "TENANT"};
}

CLI::Validator QuantityCheck() {
  return {[](std::string& value) -> std::string {
            auto bytes = ParseBytes(value);
            return bytes.ok() ? "" : bytes.status().message();
          },
          "QUANTITY"};
}

void AddSettingsFlags(CLI::App* cmd, MpsOptions* o) {
  cmd->add_option("--threads", o->threads, "Active thread percentage, 1-100")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--pinned-memory", o->pinned_memory,
                  "Pinned device memory limit per GPU (4G, 512M; whole MiB)")
      ->check(QuantityCheck());
  cmd->add_option("--priority", o->priority, "Client priority: 0 normal, 1 below normal")
      ->check(CLI::Range(0, 1));
}

// The commands, with `connect` giving the client for the --socket flag's
// value; `socket_flag`: whether there is a --socket flag.
void AddMps(CLI::App& app, DaemonConnector connect, MpsCliIo io, bool socket_flag) {
  // Shared by the callbacks, which CLI11 keeps as long as `app`.
  auto state =
      std::make_shared<std::pair<DaemonConnector, MpsCliIo>>(std::move(connect), std::move(io));
  auto o = std::make_shared<MpsOptions>();
  auto bind = [state, o](void (*command)(MpsRun&, const MpsOptions&)) {
    return [state, o, command] {
      const DaemonClient client = state->first(o->socket, std::chrono::seconds(30));
      MpsRun run(client, state->second);
      command(run, *o);
    };
  };

  CLI::App* mps = app.add_subcommand("mps", "MPS daemons and tenants on this node (gpusliced)");
  mps->require_subcommand(1);
  if (socket_flag) {
    AddSocketOption(*mps, o->socket);
    mps->fallthrough();  // `mps status --socket S` as well as `mps --socket S status`
  }

  CLI::App* status = mps->add_subcommand("status", "MPS availability, daemons and tenants");
  status->add_flag("--json", o->json, "Machine-readable output");
  status->callback(bind(Status));

  CLI::App* acquire = mps->add_subcommand(
      "acquire", "Give a tenant GPUs through MPS (or the shared tier) and print its environment");
  acquire->add_option("--tenant", o->tenant, "The tenant")->required()->check(TenantCheck());
  acquire->add_option("--gpus", o->gpus, "GPU index, UUID, or comma-separated list")->required();
  AddSettingsFlags(acquire, o.get());
  auto* acquire_json = acquire->add_flag("--json", o->json, "Machine-readable output");
  acquire->add_flag("--env", o->env, "Print only `export NAME='value'` lines (for eval)")
      ->excludes(acquire_json);
  acquire->callback(bind(Acquire));

  CLI::App* release = mps->add_subcommand("release", "Drop a tenant; idle MPS daemons stop");
  release->add_option("--tenant", o->tenant, "The tenant")->required()->check(TenantCheck());
  release->add_flag("--json", o->json, "Machine-readable output");
  release->callback(bind(Release));

  CLI::App* set = mps->add_subcommand(
      "set", "Change a tenant's MPS settings (for its processes started from now on)");
  set->add_option("--tenant", o->tenant, "The tenant")->required()->check(TenantCheck());
  AddSettingsFlags(set, o.get());
  auto* set_json = set->add_flag("--json", o->json, "Machine-readable output");
  set->add_flag("--env", o->env, "Print only `export NAME='value'` lines (for eval)")
      ->excludes(set_json);
  set->callback(bind(Set));

  CLI::App* terminate =
      mps->add_subcommand("terminate", "End one MPS client process (terminate_client)");
  terminate->add_option("--gpu", o->gpu, "GPU index or UUID")->required();
  terminate->add_option("--pid", o->pid, "The client's pid")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{INT32_MAX}));
  terminate->add_flag("--json", o->json, "Machine-readable output");
  terminate->callback(bind(Terminate));
}

MpsCliIo StandardIo() {
  return MpsCliIo{&std::cout, &std::cerr, [](int code) {
                    std::cout.flush();
                    std::cerr.flush();
                    std::exit(code);
                  }};
}

}  // namespace

void AddMpsCommands(CLI::App& app, const DaemonConnector& connect) {
  AddMpsCommands(app, connect, StandardIo());
}

void AddMpsCommands(CLI::App& app, const DaemonConnector& connect, MpsCliIo io) {
  AddMps(app, connect, std::move(io), /*socket_flag=*/true);
}

void AddMpsCommands(CLI::App& app, DaemonClient client, MpsCliIo io) {
  AddMps(
      app,
      [client = std::move(client)](const std::string&, std::chrono::milliseconds) {
        return client;
      },
      std::move(io), /*socket_flag=*/false);
}

}  // namespace gpuslice::cli
