// CDI specs for prepared claims (DESIGN.md section 5b; the Container Device
// Interface, spec version kCdiVersion). One spec file per claim,
// `dir`/gpuslice.io-<claim uid>.json, holding one device named by the claim
// UID (CDI name "gpuslice.io/claim=<uid>") whose containerEdits inject the
// limiter into the container:
//  - the limiter library, mounted read-only, and LD_PRELOAD naming it (or,
//    with ld_so_preload set, that host file mounted as /etc/ld.so.preload);
//  - the daemon's socket directory and the claim's own segment directory
//    (ClaimSegmentDir of shm_dir, shm/segment_dirs.h: never the shared one,
//    so no other group's segment is in reach), mounted at the same paths,
//    with GPUSLICE_SOCKET and GPUSLICE_SHM_DIR naming them;
//  - GPUSLICE_GROUP = the claim UID (the daemon's group for the claim);
//  - the limits as the bootstrap fallback: GPUSLICE_MEMORY_LIMIT and
//    GPUSLICE_COMPUTE_LIMIT as JSON objects keyed by GPU UUID (the daemon's
//    word wins once the limiter has registered);
//  - NVIDIA_VISIBLE_DEVICES naming the claim's GPUs, and their device nodes
//    where `dev_root` has them (/dev/nvidia<minor> by the GPU's index,
//    /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools).
// Files are replaced atomically (temporary file, fsync, rename), so a
// runtime never reads half a spec.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/kubelet/allocation_store.h"
#include "daemon/kubelet/claim_reader.h"
#include "daemon/tier.h"
#include "gpuslice/paths.h"

namespace gpuslice::daemon::kubelet {

// The least CDI version that has every field the specs use (deviceNodes'
// hostPath came in 0.5.0), as the CDI library's own rule picks one: a
// runtime refuses a spec whose version it does not know, and older runtimes
// know fewer (Debian 12's podman 4.3 reads up to 0.5.0). Annotations (0.6.0)
// are therefore not written.
inline constexpr char kCdiVersion[] = "0.5.0";
inline constexpr char kCdiKind[] = "gpuslice.io/claim";

struct CdiOptions {
  std::string dir = kDefaultCdiDir;
  std::string library = kDefaultLimiterLibrary;  // host path, mounted at the same path
  std::string ld_so_preload;  // host file for /etc/ld.so.preload; "": LD_PRELOAD instead
  std::string daemon_socket = kDefaultDaemonSocket;  // its directory is mounted
  std::string shm_dir = kDefaultGroupSegmentDir;
  std::string dev_root = "/dev";
};

// The fully qualified CDI device name of claim `claim_uid`.
std::string CdiDeviceId(const std::string& claim_uid);
// The spec file of claim `claim_uid` in `dir`.
std::string CdiSpecPath(const std::string& dir, const std::string& claim_uid);

// The spec for `a`. `gpu_index` gives each GPU UUID's index (for its device
// node); a GPU without one gets no device node.
nlohmann::json CdiSpecFor(const Allocation& a, const CdiOptions& options,
                          const std::map<std::string, uint32_t>& gpu_index);

// Creates the claim's segment directory and writes the spec of `a` to
// CdiSpecPath(options.dir, a.claim_uid), atomically. kUnavailable naming the
// file on failure.
Status WriteCdiSpec(const Allocation& a, const CdiOptions& options,
                    const std::map<std::string, uint32_t>& gpu_index);
// Removes claim `claim_uid`'s spec; OK if there is none.
Status RemoveCdiSpec(const std::string& dir, const std::string& claim_uid);
// Removes the spec file `path`; OK if there is none.
Status RemoveCdiFile(const std::string& path);

// A device plugin slice's MPS client (docs/kubelet.md "MPS"): one spec
// file per slice group, `dir`/gpuslice.io-mps-<group>.json, holding one
// device of kind kCdiMpsKind named by the group, which the slice's Allocate
// answer names (ContainerAllocateResponse.cdi_devices) and which the runtime
// reads when it creates the container, after PreStartContainer has written
// what the pod's tier gives: for `mps`, the client environment of the
// group's MPS tenant (`env`) and a read-write bind mount, at the same path,
// of each directory in `dirs` (MpsDirs: its pipe directory); otherwise only
// GPUSLICE_MPS=off (a CDI device needs an edit).
inline constexpr char kCdiMpsKind[] = "gpuslice.io/mps";
// What acquiring a group's MPS tenant gave (the daemon: GroupTiers, the grant
// a registration of the group gets).
struct MpsGrant {
  Tier tier = Tier::kShared;
  std::string reason;                      // why not, when not kMps
  std::map<std::string, std::string> env;  // the client environment, when kMps
};
using MpsAcquire =
    std::function<MpsGrant(const std::string& group, const std::vector<std::string>& uuids)>;
using MpsRelease = std::function<void(const std::string& group)>;
// The directories of a client environment to mount: its pipe directory,
// the only one a client uses (NVIDIA's MPS documentation sets the log
// directory in the control daemon's environment, whence its servers inherit
// it; a client neither reads nor writes it). On MPS v3 the pipe directory is
// the group's own tenant's, so a container sees no other group's.
std::vector<std::string> MpsDirs(const std::map<std::string, std::string>& env);
std::string CdiMpsDeviceId(const std::string& group);
std::string CdiMpsSpecPath(const std::string& dir, const std::string& group);
nlohmann::json CdiMpsSpecFor(const std::string& group,
                             const std::map<std::string, std::string>& env,
                             const std::vector<std::string>& dirs);
// Writes `spec` to `path` atomically (temporary file, fsync, rename),
// creating its directory. kUnavailable naming the file on failure.
Status WriteCdiFile(const std::string& path, const nlohmann::json& spec);

// The containerEdits.env of a spec's device, as NAME -> value.
std::map<std::string, std::string> CdiEnv(const nlohmann::json& spec);

}  // namespace gpuslice::daemon::kubelet
