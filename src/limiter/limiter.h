// Limiter: the per-process state of libgpuslice.so (DESIGN.md sections 2, 3).
//
// It joins the process to its group's segment, maps the process's CUDA
// devices onto the group's (by UUID), and keeps the process's side of the
// memory ledger: which allocation, array, VMM handle and context holds how
// many bytes of which device, so frees give back exactly what was charged.
//
// Lifecycle: nothing happens before the first hook. Attach() runs once the
// driver is initialised (from cuInit, or lazily from the first hook that
// needs it): it enumerates devices, reads the configuration, opens the
// segment and applies the limits. A configuration error is terminal for the
// process: it is printed once and every CUDA entry point that could hand out
// resources fails with CUDA_ERROR_NOT_INITIALIZED (fail closed).
//
// Registration: once attached through CUDA, the process registers with
// gpusliced (when its socket exists and GPUSLICE_REGISTER is not 0) on a
// thread of its own (registration_thread.h); the host never waits for it.
//
// Thread-safe. Fork: the child starts with an empty ledger and joins the
// group as itself on its first call (pthread_atfork), and registers itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_abi/cuda_driver_api.h"
#include "limiter/compute_gate.h"
#include "limiter/daemon_client.h"
#include "nvml_abi/nvml.h"
#include "shm/group_segment.h"

namespace gpuslice::limiter {

// Bytes charged to one device of the group.
struct Charge {
  int device = -1;  // index in the group segment
  uint64_t bytes = 0;
  uintptr_t context = 0;  // the context that owns the memory (0: outlives contexts)
};

// What a tracked handle is, so equal numeric values of different kinds
// (a device pointer, a VMM handle, an array) never collide.
enum class Resource : uint8_t { kPointer, kVmmHandle, kArray, kMipmappedArray, kContext };

class Limiter {
 public:
  // The process's limiter; created on first use, never destroyed.
  static Limiter& Get();

  // Attaches if not yet attached. Returns CUDA_SUCCESS once attached,
  // CUDA_ERROR_NOT_INITIALIZED after a configuration error, or the driver's
  // error when it cannot be asked about devices (e.g. before cuInit).
  CUresult EnsureAttached();
  // Attaches from NVML alone (a process that never initialises CUDA, such as
  // nvidia-smi): devices enumerated through NVML. False if that fails.
  bool EnsureAttachedForNvml();
  // Starts registering with gpusliced, once per process (again in a forked
  // child), if attached and registration is enabled. Never blocks.
  void StartRegistration();
  // True after a configuration error (the process fails closed).
  bool failed_closed() const { return state_.load(std::memory_order_acquire) == kFailedClosed; }

  // ---- memory ----

  // Group device index of CUDA device `ordinal`, or -1.
  int GroupDevice(CUdevice ordinal) const;
  // Group device index of the current context's device, or -1; its context
  // in `ctx` when not null.
  int CurrentGroupDevice(uintptr_t* ctx = nullptr) const;
  // Group device index of the device `stream` belongs to (current context's
  // for the legacy/per-thread default streams), or -1.
  int StreamGroupDevice(CUstream stream) const;
  // Group device index of the GPU with `uuid`, or -1.
  int GroupDeviceByUuid(const char* uuid) const;

  // Rounds an allocation up to the driver's allocation granularity.
  uint64_t Rounded(uint64_t bytes) const;
  // Bytes a context reserves on its device (GPUSLICE_CONTEXT_BYTES).
  uint64_t context_bytes() const { return context_bytes_; }

  // Charges `bytes` to `device` for this process, all or nothing.
  // REQUIRES: attached, device >= 0.
  std::optional<Charge> Reserve(int device, uint64_t bytes);
  // Charges whatever the limit says (memory the driver already handed out).
  void ForceCharge(const Charge& c);
  // Gives `c` back.
  void Release(const Charge& c);

  // Records that `id` of `kind` holds `c` (after the driver said yes).
  void Track(Resource kind, uint64_t id, const Charge& c);
  // Forgets `id` and returns its charge, if the limiter saw it.
  std::optional<Charge> Untrack(Resource kind, uint64_t id);
  // Settles the charge of tracked `id` at `actual` bytes (the driver's own
  // figure, known after the call), charging or giving back the difference.
  void Settle(Resource kind, uint64_t id, uint64_t actual);

  // Gives back everything tracked in context `ctx` (it was destroyed, and the
  // driver freed its memory with it).
  void ReleaseContext(uintptr_t ctx);

  // Primary contexts: the first retain of a device charges its reservation,
  // the release that ends the last retain gives it back (with the memory
  // allocated in it); reset ends every retain at once.
  bool PrimaryNeedsCharge(int device);
  // After a successful retain: `charge` is what this caller reserved (if it
  // saw no retain); a surplus charge from a racing retain is given back.
  void PrimaryRetainDone(int device, uintptr_t ctx, std::optional<Charge> charge);
  void PrimaryRelease(int device, bool reset);

  // The group's limit and usage on `device`.
  uint64_t MemoryLimit(int device) const;
  uint64_t MemoryUsed(int device) const;
  bool HasMemoryLimit(int device) const { return MemoryLimit(device) != kUnlimitedBytes; }

  // True if `pid` is a live member of this process's group.
  bool IsGroupMember(uint32_t pid) const;

  // The group segment (nullptr before attach).
  GroupSegment* segment() const { return segment_.get(); }

  // The process's compute gate (armed once attached).
  ComputeGate& compute_gate() { return compute_gate_; }

 private:
  enum State : int { kDetached = 0, kAttached, kFailedClosed };
  struct PrimaryCount {
    int retains = 0;
    uintptr_t ctx = 0;
    Charge charge;
  };

  Limiter();
  CUresult AttachWithCuda();
  bool Attach(const std::vector<std::pair<int, std::string>>& devices);
  // The daemon's socket when this process registers over one; empty
  // otherwise (a daemon reached over TCP cannot be looked for on disk).
  std::string DaemonSocket() const;
  // Joins a slot on first charge; -1 if that is impossible.
  int Slot();
  static void AtForkPrepare();
  static void AtForkParent();
  static void AtForkChild();

  std::atomic<int> state_{kDetached};
  std::mutex attach_mu_;  // serialises Attach
  std::unique_ptr<GroupSegment> segment_;
  std::vector<int> ordinal_to_device_;  // CUDA ordinal -> group device
  uint64_t context_bytes_ = 300ull << 20;
  uint64_t granularity_ = 2ull << 20;
  std::atomic<int> slot_{-1};
  std::atomic<bool> forked_{false};
  // What to tell gpusliced (set by Attach before state_ becomes kAttached,
  // then read-only); nullopt: registration disabled.
  std::optional<RegistrationRequest> registration_;
  DaemonEndpoint daemon_;  // where registration_ goes
  std::atomic<bool> registration_started_{false};
  ComputeGate compute_gate_;

  mutable std::mutex mu_;  // guards the maps below
  std::unordered_map<uint64_t, Charge> tracked_[5];
  std::unordered_map<int, PrimaryCount> primary_;
};

}  // namespace gpuslice::limiter
