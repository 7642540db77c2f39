#include "daemon/backstop/duty_cycle.h"

#include <algorithm>
#include <climits>
#include <csignal>
#include <set>

namespace gpuslice::daemon {

DutyCycleThrottler::DutyCycleThrottler(Options options, Signaller& signaller, Persist persist)
    : options_(options), signaller_(signaller), persist_(std::move(persist)) {}

void DutyCycleThrottler::Signal(const std::vector<ProcessRef>& processes, int sig) {
  for (const ProcessRef& p : processes) signaller_.Send(p, sig);
}

void DutyCycleThrottler::PersistNow() {
  std::vector<ProcessRef> all = Processes();
  if (all == persisted_) return;
  persisted_ = all;
  if (persist_) persist_(all);
}

void DutyCycleThrottler::Set(const std::string& key, const std::vector<ProcessRef>& processes,
                             double run_fraction, int64_t now_ns, int64_t period_ns) {
  const double f = std::clamp(run_fraction, options_.min_run_fraction, 1.0);
  auto [it, created] = throttles_.try_emplace(key);
  Throttle& t = it->second;
  std::vector<ProcessRef> left;
  for (const ProcessRef& p : t.processes) {
    if (std::find(processes.begin(), processes.end(), p) == processes.end()) left.push_back(p);
  }
  t.processes = processes;
  t.run_fraction = f;
  t.period_ns = period_ns > 0 ? period_ns : options_.period_ns;
  if (created) t.next_ns = now_ns;  // the first stop is due now (if f < 1)
  PersistNow();                     // before any of them is stopped
  Signal(left, SIGCONT);
}

void DutyCycleThrottler::Release(const std::string& key) {
  auto it = throttles_.find(key);
  if (it == throttles_.end()) return;
  // Stopped or not: a SIGCONT to a running process does nothing.
  const std::vector<ProcessRef> processes = std::move(it->second.processes);
  throttles_.erase(it);
  Signal(processes, SIGCONT);
  PersistNow();  // after they run again
}

void DutyCycleThrottler::ReleaseAll() {
  while (!throttles_.empty()) Release(throttles_.begin()->first);
}

int64_t DutyCycleThrottler::Advance(int64_t now_ns) {
  int64_t next = INT64_MAX;
  for (auto& [key, t] : throttles_) {
    if (now_ns >= t.next_ns) {
      const auto run_ns = static_cast<int64_t>(t.run_fraction * static_cast<double>(t.period_ns));
      if (t.stopped) {
        Signal(t.processes, SIGCONT);
        t.stopped = false;
        t.next_ns = now_ns + std::max<int64_t>(run_ns, 1);
      } else if (t.run_fraction < 1.0) {
        Signal(t.processes, SIGSTOP);
        t.stopped = true;
        t.next_ns = now_ns + std::max<int64_t>(t.period_ns - run_ns, 1);
      } else {
        t.next_ns = now_ns + t.period_ns;  // look again then
      }
    }
    next = std::min(next, t.next_ns);
  }
  return next;
}

bool DutyCycleThrottler::Stopped(const std::string& key) const {
  auto it = throttles_.find(key);
  return it != throttles_.end() && it->second.stopped;
}

double DutyCycleThrottler::RunFraction(const std::string& key) const {
  auto it = throttles_.find(key);
  return it == throttles_.end() ? 1.0 : it->second.run_fraction;
}

int64_t DutyCycleThrottler::Period(const std::string& key) const {
  auto it = throttles_.find(key);
  return it == throttles_.end() ? options_.period_ns : it->second.period_ns;
}

std::vector<ProcessRef> DutyCycleThrottler::Processes() const {
  std::set<ProcessRef> all;
  for (const auto& [key, t] : throttles_) all.insert(t.processes.begin(), t.processes.end());
  return {all.begin(), all.end()};
}

std::vector<ProcessRef> DutyCycleThrottler::Recover(const std::vector<ProcessRef>& recorded,
                                                    Signaller& signaller) {
  std::vector<ProcessRef> continued;
  for (const ProcessRef& p : recorded) {
    if (signaller.Send(p, SIGCONT)) continued.push_back(p);
  }
  return continued;
}

nlohmann::json ProcessRefsJson(const std::vector<ProcessRef>& processes) {
  nlohmann::json list = nlohmann::json::array();
  for (const ProcessRef& p : processes) {
    list.push_back({{"pid", p.pid}, {"start_time", p.start_time}});
  }
  return {{"processes", list}};
}

StatusOr<std::vector<ProcessRef>> ProcessRefsFromJson(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("processes") || !j["processes"].is_array()) {
    return InvalidArgument("no \"processes\" list");
  }
  std::vector<ProcessRef> out;
  for (const nlohmann::json& p : j["processes"]) {
    if (!p.is_object() || !p.contains("pid") || !p["pid"].is_number_integer() ||
        !p.contains("start_time") || !p["start_time"].is_number_unsigned()) {
      return InvalidArgument("a process needs an integer pid and start_time");
    }
    out.push_back({p["pid"].get<pid_t>(), p["start_time"].get<uint64_t>()});
  }
  return out;
}

}  // namespace gpuslice::daemon
