#include "daemon/gpu/gpu_monitor.h"

#include "common/log.h"
#include "daemon/gpu/gpu_json.h"

namespace gpuslice::daemon {
namespace {

bool SameStatus(GpuInfo a, const GpuInfo& b) {
  a.energy_mj = b.energy_mj;  // a counter: it moves whenever the GPU draws power
  return a == b;
}

const Clock& RealMonotonicClock() {
  static const auto* clock = new MonotonicClock;  // never destroyed
  return *clock;
}

}  // namespace

GpuMonitor::GpuMonitor(GpuBackend& backend, std::chrono::milliseconds interval, const Clock* clock)
    : backend_(backend),
      interval_(interval),
      clock_(clock != nullptr ? *clock : RealMonotonicClock()),
      current_(std::make_shared<Snapshot>()) {}

GpuMonitor::~GpuMonitor() { Stop(); }

void GpuMonitor::Sample() {
  MutexLock sample_lock(sample_mu_);
  std::shared_ptr<const Snapshot> prev = Current();
  auto next = std::make_shared<Snapshot>();
  next->generation = prev->generation + 1;
  nlohmann::json list = nlohmann::json::array();
  failures_at_loss_.resize(backend_.DeviceCount());
  for (uint32_t i = 0; i < backend_.DeviceCount(); ++i) {
    StatusOr<GpuInfo> info = backend_.Read(i);
    GpuInfo g;
    const GpuReadState before = i < prev->reads.size() ? prev->reads[i] : GpuReadState{};
    GpuReadState read;
    read.failures = before.failures;
    if (info.ok()) {
      g = std::move(*info);
      g.mps = mps_ ? mps_(g) : "off";
      if (features_) features_(g.features);
      read.read_ns = clock_.NowNs();
      if (before.failed) {
        GS_LOG(kInfo, "gpusliced", "event=gpu_reachable_again gpu=%u failed_reads=%llu", i,
               static_cast<unsigned long long>(read.failures - failures_at_loss_[i]));
      }
    } else {
      if (!before.failed) {
        GS_LOG(kWarn, "gpusliced", "event=gpu_unreachable gpu=%u error=\"%s\"", i,
               info.status().message().c_str());
        failures_at_loss_[i] = read.failures;
      }
      if (i < prev->gpus.size()) g = prev->gpus[i];
      read.read_ns = before.read_ns;
      read.failed = true;
      read.error = info.status().message();
      ++read.failures;
      g.index = i;
    }
    if (listener_ && (i >= prev->gpus.size() || !SameStatus(g, prev->gpus[i]))) listener_(g);
    list.push_back(GpuJson(g, read));
    next->reads.push_back(std::move(read));
    next->gpus.push_back(std::move(g));
  }
  next->gpus_json = nlohmann::json{{"gpus", std::move(list)}}.dump();
  {
    MutexLock lock(mu_);
    current_ = next;
  }
  if (sink_) sink_(*next);
  MutexLock lock(observers_mu_);
  for (Observer* o : observers_) o->OnSample(*next);
}

void GpuMonitor::AddObserver(Observer* observer) {
  MutexLock lock(observers_mu_);
  observers_.push_back(observer);
}

void GpuMonitor::RemoveObserver(Observer* observer) {
  MutexLock lock(observers_mu_);
  std::erase(observers_, observer);
}

void GpuMonitor::Start() {
  Sample();
  thread_ = std::thread([this] { Loop(); });
}

void GpuMonitor::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GpuMonitor::Poke() {
  {
    MutexLock lock(mu_);
    poked_ = true;
  }
  cv_.notify_all();
}

std::shared_ptr<const Snapshot> GpuMonitor::Current() const {
  MutexLock lock(mu_);
  return current_;
}

void GpuMonitor::Loop() {
  for (;;) {
    {
      MutexLock lock(mu_);
      cv_.wait_for(lock, interval_, [&]() REQUIRES(mu_) { return stop_ || poked_; });
      if (stop_) return;
      poked_ = false;
    }
    Sample();
    if (tick_) tick_();
    MutexLock lock(observers_mu_);
    for (Observer* o : observers_) o->OnTick();
  }
}

std::vector<GpuProcessReading> ReadProcesses(GpuBackend& backend, const Snapshot& snapshot,
                                             std::optional<uint64_t> samples_since_us) {
  std::vector<GpuProcessReading> readings;
  readings.reserve(snapshot.gpus.size());
  for (const GpuInfo& gpu : snapshot.gpus) {
    GpuProcessReading& r = readings.emplace_back();
    r.index = gpu.index;
    r.uuid = gpu.uuid;
    auto processes = backend.Processes(gpu.index);
    if (!processes.ok()) continue;  // unreadable this time
    r.processes = std::move(*processes);
    if (!samples_since_us) continue;
    if (auto samples = backend.ProcessUtilizationSince(gpu.index, *samples_since_us);
        samples.ok()) {
      r.samples = std::move(*samples);
    }
  }
  return readings;
}

}  // namespace gpuslice::daemon
