#include "cli/top/top_command.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cli/daemon_call.h"
#include "cli/exit_codes.h"
#include "cli/paths.h"
#include "cli/registry_view.h"
#include "cli/top/top_keys.h"
#include "cli/top/top_model.h"
#include "cli/top/top_source.h"
#include "cli/top/top_view.h"
#include "cli/unix_http_client.h"
#include "common/clock.h"

namespace gpuslice::cli {
namespace {

using json = nlohmann::json;
using top::KeyAction;

struct TopOptions {
  double interval_s = 1.0;
  int count = 0;  // 0: until q
  bool once = false;
  bool plain = false;
  bool no_daemon = false;
  std::string socket;
  std::string shm_dir;
};

// How long one request to the daemon may take before the view goes on
// without it (a hung daemon must not freeze the screen).
constexpr std::chrono::milliseconds kDaemonTimeout{1000};

// Plain output: asked for, a dumb or unknown terminal, or stdout not a terminal.
bool PlainWanted(const TopOptions& o) {
  if (o.plain || o.once) return true;
  const char* term = getenv("TERM");
  if (term == nullptr || *term == '\0' || std::string(term) == "dumb") return true;
  return isatty(STDOUT_FILENO) == 0 || isatty(STDIN_FILENO) == 0;
}

// "pause train: HTTP 404: no such route" from a refused answer.
std::string Refusal(const std::string& what, const HttpResponse& r) {
  const json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  std::string message = DaemonError(r, j);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return what + ": HTTP " + std::to_string(r.status) + ": " + message;
}

// Performs `a` through the daemon; the line for the status bar.
std::string Perform(const KeyAction& a, const top::DaemonFetch* fetch, bool daemon_answering) {
  const std::string id = a.group;
  std::string what;
  switch (a.kind) {
    case KeyAction::Kind::kPause:
      what = "pause " + id;
      break;
    case KeyAction::Kind::kResume:
      what = "resume " + id;
      break;
    case KeyAction::Kind::kSetLimit:
      what = "compute limit of " + id + " to " + std::to_string(a.percent) + "%";
      break;
    default:
      return "";
  }
  if (fetch == nullptr) return what + ": needs gpusliced (--no-daemon is set)";
  if (!daemon_answering) return what + ": needs gpusliced, which is not answering";
  if (a.kind == KeyAction::Kind::kSetLimit) {
    // PUT replaces the group's limits: keep the others (memory, per-GPU).
    auto current = (*fetch)("GET", "/v1/groups/" + id, "");
    if (!current.ok()) return what + ": " + current.status().message();
    json limits = json::object();
    if (current->status == 200) {
      const json g = json::parse(current->body, nullptr, /*allow_exceptions=*/false);
      if (g.is_object() && g.contains("limits")) limits = g["limits"];
    }
    GroupSetFlags flags;
    flags.compute = {{"", static_cast<uint32_t>(a.percent)}};
    auto body = GroupPutBody(limits, flags, {});
    if (!body.ok()) return what + ": " + body.status().message();
    auto r = (*fetch)("PUT", "/v1/groups/" + id, body->dump());
    if (!r.ok()) return what + ": " + r.status().message();
    if (r->status / 100 != 2) return Refusal(what, *r);
    return what + ": done";
  }
  const std::string verb = a.kind == KeyAction::Kind::kPause ? "pause" : "resume";
  auto r = (*fetch)("POST", "/v1/groups/" + id + "/" + verb, "");
  if (!r.ok()) return what + ": " + r.status().message();
  if (r->status / 100 != 2) return Refusal(what, *r);
  return what + ": done";
}

int RunPlain(const TopOptions& o, top::TopModel& model, const top::DaemonFetch* fetch,
             const std::string& socket, const top::SegmentReader& segments) {
  const int frames = o.once ? 1 : o.count;
  const top::TopUi ui;
  for (int n = 0; frames == 0 || n < frames; ++n) {
    if (n > 0) std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s));
    model.Update(top::Collect(fetch, socket, segments, RealtimeNs()));
    const std::string frame = PlainFrame(model, ui);
    fputs(frame.c_str(), stdout);
    fflush(stdout);
  }
  return 0;
}

int RunLive(const TopOptions& o, top::TopModel& model, const top::DaemonFetch* fetch,
            const std::string& socket, const top::SegmentReader& segments) {
  top::CursesView view;
  view.Start();
  top::TopUi ui;
  const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(o.interval_s));
  auto next_poll = std::chrono::steady_clock::now();
  int frames = 0;
  while (true) {
    if (std::chrono::steady_clock::now() >= next_poll) {
      if (o.count > 0 && frames >= o.count) break;
      model.Update(top::Collect(fetch, socket, segments, RealtimeNs()));
      ++frames;
      next_poll = std::chrono::steady_clock::now() + interval;
      view.Draw(model, ui);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
        next_poll - std::chrono::steady_clock::now());
    const int key = view.ReadKey(static_cast<int>(std::max<int64_t>(0, wait.count())));
    if (key == top::CursesView::kNoKey) continue;
    if (key != top::CursesView::kResized) {
      const KeyAction a = HandleKey(ui, key, model.Rows(ui.sort, ui.filter));
      if (a.kind == KeyAction::Kind::kQuit) break;
      if (a.kind != KeyAction::Kind::kNone) {
        ui.status = Perform(a, fetch, model.sample().daemon_answered);
        next_poll = std::chrono::steady_clock::now();  // show the effect at once
      }
    }
    view.Draw(model, ui);
  }
  view.Stop();
  return 0;
}

void Top(const TopOptions& o) {
  const std::string socket = DaemonSocket(o.socket);
  const std::string dir = ShmDir(o.shm_dir);
  const top::DaemonFetch fetch = [socket](const std::string& method, const std::string& target,
                                          const std::string& body) {
    return UnixHttpClient(socket, kDaemonTimeout).Request(method, target, body);
  };
  const top::SegmentReader segments = [dir] { return top::ReadSegments(dir); };
  top::TopModel model;
  const top::DaemonFetch* daemon = o.no_daemon ? nullptr : &fetch;
  const int code = PlainWanted(o) ? RunPlain(o, model, daemon, socket, segments)
                                  : RunLive(o, model, daemon, socket, segments);
  if (code != 0) exit(code);
}

}  // namespace

void AddTopCommand(CLI::App& app) {
  auto* o = new TopOptions;  // lives as long as the process: CLI11 keeps pointers
  CLI::App* top = app.add_subcommand(
      "top", "Live view of the GPUs and groups: shares, limits, memory, state (q quits)");
  top->add_option("--interval", o->interval_s, "Seconds between samples (default 1)")
      ->check(CLI::Range(0.05, 3600.0));
  top->add_option("--count", o->count, "Stop after this many samples (default: until q)")
      ->check(CLI::NonNegativeNumber);
  top->add_flag("--once", o->once, "Print one plain table and exit");
  top->add_flag("--plain", o->plain,
                "One plain table per interval (also on TERM=dumb or when stdout is not a "
                "terminal)");
  top->add_flag("--no-daemon", o->no_daemon, "Read the group segments only; do not ask gpusliced");
  top->add_option("--socket", o->socket,
                  "Daemon socket (default: $GPUSLICE_SOCKET or /run/gpuslice/gpusliced.sock)");
  top->add_option("--shm-dir", o->shm_dir,
                  "Directory of the group segments (default: $GPUSLICE_SHM_DIR or "
                  "/dev/shm/gpuslice)");
  top->callback([o] { Top(*o); });
}

}  // namespace gpuslice::cli
