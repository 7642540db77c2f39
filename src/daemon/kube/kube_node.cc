#include "daemon/kube/kube_node.h"

#include <cstdlib>
#include <optional>

#include "common/log.h"

namespace gpuslice::daemon::kube {

StatusOr<KubeConfig> KubeConfigFromFlags(const std::string& api, const std::string& ca,
                                         const std::string& token_file) {
  if (api == "in-cluster") {
    return InClusterConfig([](const char* name) { return std::getenv(name); });  // NOLINT
  }
  return ExplicitConfig(api, ca, token_file);
}

KubeNode::KubeNode(KubeNodeOptions options, TenantRegistry& registry, PodWatch::EventSink sink,
                   GpuSource gpus)
    : options_(std::move(options)),
      client_(options_.api),
      target_(registry),
      pods_(target_, std::move(sink), KubeEventRecorder(client_, "gpusliced", options_.node)),
      reflector_(client_,
                 Reflector::Options{.collection = "/api/v1/pods",
                                    .field_selector = "spec.nodeName=" + options_.node,
                                    .label_selector = "",
                                    .name = "pods",
                                    .watch_timeout_s = 300,
                                    .idle_timeout_ms = 150'000,
                                    .initial_backoff = options_.retry_initial,
                                    .max_backoff = options_.retry_max},
                 pods_, sleeper_),
      publisher_(client_, options_.node),
      gpus_(std::move(gpus)) {}

KubeNode::~KubeNode() { Stop(); }

void KubeNode::Start() {
  GS_LOG(kInfo, "kube", "event=kube_started node=%s server=%s slices=%d", options_.node.c_str(),
         options_.api.server.c_str(), options_.publish_slices ? 1 : 0);
  reflector_.Start();
  if (options_.publish_slices) publisher_thread_ = std::thread([this] { PublishLoop(); });
}

void KubeNode::Stop() {
  reflector_.Stop();
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (publisher_thread_.joinable()) publisher_thread_.join();
}

void KubeNode::GpusChanged() {
  {
    MutexLock lock(mu_);
    changed_ = true;
  }
  cv_.notify_all();
}

void KubeNode::PublishLoop() {
  std::optional<std::vector<SliceGpu>> published;  // what the server has, as far as we know
  auto retry = options_.retry_initial;
  auto next_resync = std::chrono::steady_clock::now();
  MutexLock lock(mu_);
  while (!stop_) {
    changed_ = false;
    lock.Unlock();
    std::vector<SliceGpu> gpus = gpus_();
    const bool due = std::chrono::steady_clock::now() >= next_resync;
    Status s;
    if (gpus.empty() && !published) {
      s = Unavailable("no GPU known yet");
    } else if (due || !published || *published != gpus) {
      s = publisher_.Publish(gpus);
      if (s.ok()) {
        published = gpus;
        next_resync = std::chrono::steady_clock::now() + options_.resync;
      }
    }
    lock.Lock();
    if (s.ok()) {
      retry = options_.retry_initial;
      cv_.wait_for(lock, options_.poll, [this]() REQUIRES(mu_) { return stop_ || changed_; });
    } else {
      GS_LOG(kWarn, "kube", "event=resource_slices_failed error=\"%s\" retry_ms=%lld",
             s.message().c_str(), static_cast<long long>(retry.count()));  // NOLINT
      cv_.wait_for(lock, retry, [this]() REQUIRES(mu_) { return stop_; });
      retry = std::min(retry * 2, options_.retry_max);
    }
  }
}

}  // namespace gpuslice::daemon::kube
