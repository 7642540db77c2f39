// GpuMonitor: samples every GPU through the backend on its own thread and
// publishes an immutable Snapshot that readers (GET /v1/gpus, /metrics, the
// node segment) use without touching NVML. Reports each GPU whose status
// changed. A GPU whose read fails (NVML_ERROR_GPU_IS_LOST: fallen off the
// bus) keeps its last values, marked failed with the error, and the others
// are read as before; the failure is logged once when it starts
// (event=gpu_unreachable) and once when a read works again
// (event=gpu_reachable_again failed_reads=N).
//
// Thread safety: Current(), Poke() and Add/RemoveObserver from any thread;
// Sample() runs on the monitor thread (or the caller's, in tests). Set the
// callbacks before Start.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/thread_annotations.h"
#include "daemon/gpu/backend.h"

namespace gpuslice::daemon {

// How fresh one GPU's entry of a Snapshot is.
struct GpuReadState {
  int64_t read_ns = 0;    // CLOCK_MONOTONIC of the read its values come from; 0: never read
  bool failed = false;    // this sample's read failed (the values, if any, are older)
  std::string error{};    // why, when failed (e.g. "nvmlDeviceGetUUID: GPU is lost")
  uint64_t failures = 0;  // reads of this GPU that failed since the monitor started

  bool operator==(const GpuReadState&) const = default;
};

struct Snapshot {
  uint64_t generation = 0;          // 0: nothing sampled yet
  std::vector<GpuInfo> gpus;        // by index; a GPU that failed to read keeps its last sample
  std::string gpus_json;            // the body of GET /v1/gpus, serialised once per sample
  std::vector<GpuReadState> reads;  // beside gpus, by index
};

class GpuMonitor {
 public:
  // Fills GpuInfo::mps for a GPU ("off" when no provider is set).
  using MpsProvider = std::function<std::string(const GpuInfo&)>;
  // Called on the sampling thread for each GPU whose status differs from the
  // previous sample (anything but the energy counter).
  using ChangeListener = std::function<void(const GpuInfo&)>;

  // Called on the sampling thread with every new snapshot, once it is current.
  using SampleSink = std::function<void(const Snapshot&)>;

  // Told of the samples from when it is added (AddObserver) until it is
  // removed: what is built after the monitor starts (the node segment, the
  // kubelet side) registers so. Calls never overlap.
  class Observer {
   public:
    virtual ~Observer() = default;
    // After every sample, once it is current, after the sample sink.
    virtual void OnSample(const Snapshot& /*snapshot*/) {}
    // On the monitor thread after each sample of its loop, after the tick hook.
    virtual void OnTick() {}
  };

  // `clock` (CLOCK_MONOTONIC; null: the real one) stamps the reads and must
  // outlive the monitor.
  GpuMonitor(GpuBackend& backend, std::chrono::milliseconds interval, const Clock* clock = nullptr);
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  void SetMpsProvider(MpsProvider provider) { mps_ = std::move(provider); }
  // Fills the node's part of GpuInfo::features (cgroup v2, MPS) after each read.
  void SetFeaturesProvider(std::function<void(GpuFeatures&)> provider) {
    features_ = std::move(provider);
  }
  void SetChangeListener(ChangeListener listener) { listener_ = std::move(listener); }
  // Runs on the monitor thread after every sample (the daemon expires leases there).
  void SetTickHook(std::function<void()> hook) { tick_ = std::move(hook); }
  // Runs after every sample, Start's first one included (the daemon writes the
  // node segment there). Samples, and so calls, never overlap.
  void SetSampleSink(SampleSink sink) { sink_ = std::move(sink); }
  // REQUIRES: `observer` stays valid until RemoveObserver returns (or the
  // monitor goes).
  void AddObserver(Observer* observer);
  // Once this returns `observer` is not called again (a call under way has
  // ended). REQUIRES: not called from an observer's call.
  void RemoveObserver(Observer* observer);

  // One sampling round, synchronously.
  void Sample();
  // Samples now and then every interval until Stop.
  void Start();
  void Stop();
  // Asks the monitor thread to sample as soon as possible.
  void Poke();

  std::shared_ptr<const Snapshot> Current() const;

 private:
  void Loop();

  GpuBackend& backend_;
  const std::chrono::milliseconds interval_;
  MpsProvider mps_;
  std::function<void(GpuFeatures&)> features_;
  ChangeListener listener_;
  std::function<void()> tick_;
  SampleSink sink_;
  const Clock& clock_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::shared_ptr<const Snapshot> current_ GUARDED_BY(mu_);
  bool poked_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  Mutex observers_mu_;  // held during their calls
  std::vector<Observer*> observers_ GUARDED_BY(observers_mu_);
  Mutex sample_mu_;  // one Sample at a time
  // By index: GpuReadState::failures when the GPU's current run of failed reads began.
  std::vector<uint64_t> failures_at_loss_ GUARDED_BY(sample_mu_);
  std::thread thread_;
};

// Reads the compute processes of every GPU of `snapshot` (index and UUID),
// and, with `samples_since_us`, their utilization samples newer than it: one
// reading per GPU, in the snapshot's order.
std::vector<GpuProcessReading> ReadProcesses(GpuBackend& backend, const Snapshot& snapshot,
                                             std::optional<uint64_t> samples_since_us);

}  // namespace gpuslice::daemon
