#include "cli/top/top_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "cli/paths.h"
#include "cli/process_lifetime.h"
#include "cli/top/top_actions.h"
#include "cli/top/top_keys.h"
#include "cli/top/top_model.h"
#include "cli/top/top_source.h"
#include "cli/top/top_view.h"
#include "cli/unix_http_client.h"
#include "common/clock.h"

namespace gpuslice::cli {
namespace {

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
        ui.status = top::Perform(a, fetch, model.sample().daemon_answered);
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
  auto* o = ProcessLifetime<TopOptions>();  // CLI11 keeps pointers (process_lifetime.h)
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
