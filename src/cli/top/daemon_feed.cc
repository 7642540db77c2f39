#include "cli/top/daemon_feed.h"

#include <utility>

namespace gpuslice::cli::top {

DaemonFeed::DaemonFeed(DaemonClient client, Options options)
    : client_(std::move(client)), options_(options), thread_([this] { Run(); }) {}

DaemonFeed::~DaemonFeed() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

DaemonFeed::State DaemonFeed::Get() const {
  MutexLock lock(mu_);
  return state_;
}

DaemonFeed::State DaemonFeed::WaitNewer(uint64_t seen, std::chrono::milliseconds timeout) const {
  MutexLock lock(mu_);
  changed_.wait_for(lock, timeout, [&]() REQUIRES(mu_) { return state_.version > seen || stop_; });
  return state_;
}

void DaemonFeed::Lost(const std::string& why) {
  {
    MutexLock lock(mu_);
    const bool change = state_.connected || !state_.resolved || state_.error != why;
    state_.connected = false;
    state_.resolved = true;
    state_.error = why;
    if (change) ++state_.version;
  }
  changed_.notify_all();
}

void DaemonFeed::Run() {
  for (;;) {
    {
      MutexLock lock(mu_);
      if (stop_) return;
    }
    const Status s = client_.Events(options_.tick, options_.idle, [this](const SseEvent* e) {
      MutexLock lock(mu_);
      if (stop_) return false;
      if (e == nullptr || e->type != "sample") return true;
      nlohmann::json data = nlohmann::json::parse(e->data, nullptr, /*allow_exceptions=*/false);
      if (!data.is_object()) return true;
      state_.last = std::make_shared<const nlohmann::json>(std::move(data));
      state_.connected = true;
      state_.resolved = true;
      state_.error.clear();
      ++state_.samples;
      ++state_.version;
      changed_.notify_all();
      return true;
    });
    {
      MutexLock lock(mu_);
      if (stop_) return;
    }
    Lost(s.ok() ? "the event stream ended" : s.message());
    MutexLock lock(mu_);
    changed_.wait_for(lock, options_.retry, [this]() REQUIRES(mu_) { return stop_; });
    if (stop_) return;
  }
}

}  // namespace gpuslice::cli::top
