// KubeNode: the daemon's API-server side of Kubernetes, started by
// --kube-node (docs/kubernetes.md): the pod watch scoped to the node
// (PodWatch on a Reflector, settings into the TenantRegistry) and the
// ResourceSlice publisher (republished when the node's GPUs change, retried
// with backoff while the API server is away).
//
// Threads: two of its own (the pod reflector, the publisher); Start/Stop from
// one thread; GpusChanged from any.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/kube/kube_client.h"
#include "daemon/kube/pod_watch.h"
#include "daemon/kube/reflector.h"
#include "daemon/kube/resource_slices.h"
#include "daemon/tenants/registry.h"

namespace gpuslice::daemon::kube {

struct KubeNodeOptions {
  std::string node;  // the Node's name (spec.nodeName of its pods)
  KubeConfig api;
  bool publish_slices = true;
  std::chrono::milliseconds retry_initial{1'000};
  std::chrono::milliseconds retry_max{60'000};
  std::chrono::milliseconds poll{10'000};     // the GPU source is looked at this often
  std::chrono::milliseconds resync{300'000};  // slices checked on the server this often
};

// The API server configuration the flags name: `api` is "in-cluster" or a
// URL (then `ca` and `token_file` are used). kInvalidArgument /
// kFailedPrecondition saying what is missing.
StatusOr<KubeConfig> KubeConfigFromFlags(const std::string& api, const std::string& ca,
                                         const std::string& token_file);

class KubeNode {
 public:
  using GpuSource = std::function<std::vector<SliceGpu>()>;

  // REQUIRES: `registry` outlives the node.
  KubeNode(KubeNodeOptions options, TenantRegistry& registry, PodWatch::EventSink sink,
           GpuSource gpus);
  ~KubeNode();  // Stop()s
  KubeNode(const KubeNode&) = delete;
  KubeNode& operator=(const KubeNode&) = delete;

  // Where the settings of pods that use gpuslice's device plugins go
  // (PodWatch rule 6). REQUIRES: before Start().
  void SetDevicePluginPods(PodWatch::DevicePluginPods pods) {
    pods_.SetDevicePluginPods(std::move(pods));
  }

  void Start();
  void Stop();
  // The GPU set may have changed: the publisher looks again now (else
  // within options.poll).
  void GpusChanged();

  KubeClient& client() { return client_; }

 private:
  void PublishLoop();

  const KubeNodeOptions options_;
  KubeClient client_;
  RegistrySettingsTarget target_;
  PodWatch pods_;
  RealSleeper sleeper_;
  Reflector reflector_;
  SlicePublisher publisher_;
  const GpuSource gpus_;

  Mutex mu_;
  std::condition_variable_any cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool changed_ GUARDED_BY(mu_) = true;
  std::thread publisher_thread_;
};

}  // namespace gpuslice::daemon::kube
