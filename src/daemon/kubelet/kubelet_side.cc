#include "daemon/kubelet/kubelet_side.h"

#include <CLI/CLI.hpp>

#include "common/log.h"
#include "daemon/kubelet/device_plugin.h"

namespace gpuslice::daemon::kubelet {

namespace {

// Until the API-server client is wired: every read says why it cannot be done.
class NoClaimReader final : public ClaimReader {
 public:
  StatusOr<ClaimInfo> Read(const ClaimRef& ref) override {
    return Unavailable("claim " + ref.claim_namespace + "/" + ref.name +
                       ": no source of ResourceClaims (start gpusliced with --dra-claims-dir "
                       "or with the API server client)");
  }
};

}  // namespace

void AddKubeletFlags(CLI::App& app, KubeletConfig& config) {
  app.add_option("--kubelet-dir", config.kubelet_dir,
                 "The kubelet's directory: plugins/, plugins_registry/, device-plugins/, "
                 "pod-resources/ (default /var/lib/kubelet)");
  app.add_flag("--dra", config.dra,
               "Serve the DRA kubelet plugin gpuslice.io (docs/kubernetes.md; off by default)");
  app.add_flag("--device-plugin", config.device_plugin,
               "Serve the device plugins gpuslice.io/vgpu, gpu-memory, gpu-cores (off by default)");
  app.add_option("--cdi-dir", config.cdi_dir,
                 "Where CDI specs of prepared claims are written (default /var/run/cdi)");
  app.add_option("--dra-claims-dir", config.claims_dir,
                 "Read ResourceClaims from DIR/<namespace>/<name>.json instead of the API server");
  app.add_option("--limiter-library", config.limiter_library,
                 "Host path of libgpuslice.so, mounted into containers "
                 "(default /usr/lib/gpuslice/libgpuslice.so)");
  app.add_option("--ld-so-preload", config.ld_so_preload,
                 "Host file mounted as the containers' /etc/ld.so.preload instead of LD_PRELOAD");
  app.add_option("--vgpu-per-gpu", config.device_plugin_slices,
                 "gpuslice.io/vgpu devices advertised per GPU (default 10)");
  app.add_option("--gpu-memory-unit-mib", config.memory_unit_mib,
                 "MiB per gpuslice.io/gpu-memory device (default 1; raise it on GPUs above "
                 "~48 GiB: the kubelet reads at most 4 MiB of device list)");
}

StatusOr<std::unique_ptr<KubeletSide>> KubeletSide::Start(const KubeletConfig& config,
                                                          Context context) {
  std::unique_ptr<KubeletSide> side(new KubeletSide());
  side->sink_ = std::make_unique<RegistryLimitSink>(context.registry);
  side->store_ = std::make_unique<AllocationStore>(context.state, *side->sink_);
  if (Status s = side->store_->Restore(); !s.ok()) {
    GS_LOG(kError, "kubelet", "event=allocations_restore_failed error=\"%s\"", s.message().c_str());
  }
  CdiOptions cdi;
  cdi.dir = config.cdi_dir;
  cdi.library = config.limiter_library;
  cdi.ld_so_preload = config.ld_so_preload;
  cdi.daemon_socket = context.daemon_socket;
  cdi.shm_dir = context.shm_dir;
  if (config.dra) {
    ClaimReader* reader = context.claim_reader;
    if (reader == nullptr) {
      if (config.claims_dir.empty()) {
        side->owned_reader_ = std::make_unique<NoClaimReader>();
      } else {
        side->owned_reader_ = std::make_unique<FileClaimReader>(config.claims_dir);
      }
      reader = side->owned_reader_.get();
    }
    DraPluginOptions options;
    options.plugin_socket = config.kubelet_dir + "/plugins/" + kDriverName + "/dra.sock";
    options.registration_socket =
        config.kubelet_dir + "/plugins_registry/" + kDriverName + "-reg.sock";
    options.cdi = cdi;
    side->dra_ = std::make_unique<DraPlugin>(options, *reader, *side->store_, context.node_gpus);
    GS_RETURN_IF_ERROR(side->dra_->Start());
  }
  if (config.device_plugin) {
    // Its own record: these allocations' limits travel in the containers'
    // environment, their group being the pod (device_plugin.h).
    side->no_sink_ = std::make_unique<NoLimitSink>();
    side->dp_store_ =
        std::make_unique<AllocationStore>(context.state, *side->no_sink_, "kube_device_plugin");
    if (Status s = side->dp_store_->Restore(); !s.ok()) {
      GS_LOG(kError, "kubelet", "event=allocations_restore_failed error=\"%s\"",
             s.message().c_str());
    }
    DevicePluginOptions options;
    options.dir = config.kubelet_dir + "/device-plugins";
    options.pod_resources_socket = config.kubelet_dir + "/pod-resources/kubelet.sock";
    options.vgpu_per_gpu = config.device_plugin_slices;
    options.memory_unit_mib = config.memory_unit_mib;
    options.inject = cdi;
    side->device_plugins_ = std::make_unique<DevicePlugins>(
        options, *side->dp_store_, [node_gpus = context.node_gpus, memory = context.memory] {
          std::vector<GpuOffer> offers;
          for (const NodeGpu& g : node_gpus()) {
            offers.push_back(GpuOffer{g.index, g.uuid, memory ? memory(g.uuid) : 0});
          }
          return offers;
        });
    GS_RETURN_IF_ERROR(side->device_plugins_->Start());
  }
  return side;
}

KubeletSide::~KubeletSide() { Stop(); }

void KubeletSide::Stop() {
  if (dra_) dra_->Stop();
  if (device_plugins_) device_plugins_->Stop();
}

}  // namespace gpuslice::daemon::kubelet
