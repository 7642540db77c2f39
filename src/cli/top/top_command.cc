#include "cli/top/top_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cli/common_flags.h"
#include "cli/daemon_client.h"
#include "cli/paths.h"
#include "cli/process_lifetime.h"
#include "cli/top/daemon_feed.h"
#include "cli/top/nvml_gpus.h"
#include "cli/top/top_actions.h"
#include "cli/top/top_keys.h"
#include "cli/top/top_model.h"
#include "cli/top/top_source.h"
#include "cli/top/top_view.h"
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
// How long the first frame waits for the daemon's first sample (it samples
// once a second) before it shows the segments.
constexpr std::chrono::milliseconds kFirstSampleWait{1500};
// How long a frame waits for the daemon's next sample before it shows the
// last one again.
constexpr std::chrono::milliseconds kSampleWait{2500};

// Plain output: asked for, a dumb or unknown terminal, or stdout not a terminal.
bool PlainWanted(const TopOptions& o) {
  if (o.plain || o.once) return true;
  const char* term = getenv("TERM");
  if (term == nullptr || *term == '\0' || std::string(term) == "dumb") return true;
  return isatty(STDOUT_FILENO) == 0 || isatty(STDIN_FILENO) == 0;
}

// Where the frames come from: the daemon's samples while its event stream is
// up, else the segments and NVML (opened the first time it is needed).
class Sources {
 public:
  Sources(const TopOptions& o, const DaemonConnector& connect)
      : interval_(std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::duration<double>(o.interval_s))),
        dir_(ShmDir(o.shm_dir)) {
    if (o.no_daemon) return;
    client_.emplace(connect(o.socket, kDaemonTimeout));
    where_ = client_->Where();
    if (where_.starts_with("gpusliced at ")) where_ = where_.substr(13);
    feed_ = std::make_unique<top::DaemonFeed>(*client_, top::DaemonFeed::Options{});
  }

  const DaemonClient* client() const { return client_ ? &*client_ : nullptr; }

  // Waits for what the next frame shows: the daemon's next sample while its
  // stream is up (at most kSampleWait), else `interval` (cut short when the
  // daemon comes back). The first frame waits for the daemon's first answer.
  void Wait() {
    if (!feed_) {
      if (frames_ > 0) std::this_thread::sleep_for(interval_);
      return;
    }
    if (frames_ == 0) {
      state_ = feed_->WaitNewer(0, kFirstSampleWait);
      if (!state_.resolved) state_ = feed_->Get();
      return;
    }
    state_ = feed_->WaitNewer(state_.version, state_.connected ? kSampleWait : interval_);
  }

  // True when the daemon has a sample the last frame did not show, or, without
  // it, when `interval` has passed since the last frame (the live loop's check).
  bool Due(std::chrono::steady_clock::time_point now) {
    if (frames_ == 0) return true;
    if (feed_) {
      const top::DaemonFeed::State s = feed_->Get();
      if (s.connected && s.samples != shown_samples_) {
        state_ = s;
        return true;
      }
      if (s.connected != state_.connected) {
        state_ = s;
        return true;
      }
      state_ = s;
      if (s.connected) return false;
    }
    return now >= last_frame_ + interval_;
  }

  top::Sample Next() {
    ++frames_;
    last_frame_ = std::chrono::steady_clock::now();
    const std::vector<GroupSnapshot> segments = top::ReadSegments(dir_);
    if (feed_ && state_.connected && state_.last != nullptr) {
      shown_samples_ = state_.samples;
      return top::FromDaemonSample(*state_.last, where_, segments, RealtimeNs());
    }
    if (!nvml_ && nvml_error_.empty()) {
      auto n = top::NvmlGpus::Open();
      if (n.ok()) {
        nvml_ = std::move(*n);
      } else {
        nvml_error_ = n.status().message();
      }
    }
    std::string why = state_.error;
    if (feed_ && why.empty()) why = "no sample from the event stream yet";
    return top::LocalSample(nvml_ ? nvml_->Read() : std::vector<top::GpuInfo>{}, nvml_error_,
                            feed_ != nullptr, why, where_, segments, RealtimeNs());
  }

 private:
  const std::chrono::milliseconds interval_;
  const std::string dir_;
  std::optional<DaemonClient> client_;
  std::string where_;
  std::unique_ptr<top::DaemonFeed> feed_;
  top::DaemonFeed::State state_;
  uint64_t shown_samples_ = 0;
  int frames_ = 0;
  std::chrono::steady_clock::time_point last_frame_;
  std::unique_ptr<top::NvmlGpus> nvml_;
  std::string nvml_error_;
};

int RunPlain(const TopOptions& o, top::TopModel& model, Sources& sources) {
  const int frames = o.once ? 1 : o.count;
  const top::TopUi ui;
  for (int n = 0; frames == 0 || n < frames; ++n) {
    sources.Wait();
    model.Update(sources.Next());
    const std::string frame = PlainFrame(model, ui);
    fputs(frame.c_str(), stdout);
    fflush(stdout);
  }
  return 0;
}

int RunLive(const TopOptions& o, top::TopModel& model, Sources& sources) {
  top::CursesView view;
  view.Start();
  top::TopUi ui;
  int frames = 0;
  bool first = true;
  while (true) {
    if (first || sources.Due(std::chrono::steady_clock::now())) {
      if (o.count > 0 && frames >= o.count) break;
      if (first) sources.Wait();  // the daemon's first answer
      first = false;
      model.Update(sources.Next());
      ++frames;
      view.Draw(model, ui);
    }
    // Keys (and resizes) are read between frames; a frame is due at the
    // latest an interval, or one daemon sample, from now.
    const int key = view.ReadKey(50);
    if (key == top::CursesView::kNoKey) continue;
    if (key != top::CursesView::kResized) {
      const KeyAction a = HandleKey(ui, key, model.Rows(ui.sort, ui.filter));
      if (a.kind == KeyAction::Kind::kQuit) break;
      if (a.kind != KeyAction::Kind::kNone) {
        ui.status = top::Perform(a, sources.client(), model.sample().daemon_answered);
      }
    }
    view.Draw(model, ui);
  }
  view.Stop();
  return 0;
}

void Top(const TopOptions& o, const DaemonConnector& connect) {
  Sources sources(o, connect);
  top::TopModel model;
  const int code = PlainWanted(o) ? RunPlain(o, model, sources) : RunLive(o, model, sources);
  if (code != 0) exit(code);
}

}  // namespace

void AddTopCommand(CLI::App& app, const DaemonConnector& connect) {
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
  top->add_flag("--no-daemon", o->no_daemon,
                "Read the group segments and NVML only; do not ask gpusliced");
  AddSocketOption(*top, o->socket);
  AddShmDirOption(*top, o->shm_dir);
  top->callback([o, connect] { Top(*o, connect); });
}

}  // namespace gpuslice::cli
