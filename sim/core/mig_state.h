// The MIG state of a simulated GPU: its mode and its GPU and compute
// instances (DeviceState::mig_*), and the operations NVML's MIG API is built
// from, with NVIDIA's documented semantics (docs/sim.md "MIG"):
//  - a mode change is recorded as the pending mode and takes effect at once
//    only while no process has a context on the GPU (and, to disable, no GPU
//    instance is left); otherwise it stays pending (NVML's activation status
//    NVML_ERROR_IN_USE) and a later change on an idle GPU applies it;
//  - GPU instances are created from the GPU's profiles (mig_profiles.h) at a
//    free placement, the lowest or the one asked for; compute instances
//    within a GPU instance, of its compute slices;
//  - an instance in use (a GPU instance with compute instances) is not
//    destroyed;
//  - each compute instance is a MIG device with its own "MIG-" UUID.
// Every function takes the state under its lock (SimGpu::WithState).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sim/core/mig_profiles.h"
#include "sim/core/state.h"

namespace gpuslice::sim {

// NVML_DEVICE_MIG_DISABLE and NVML_DEVICE_MIG_ENABLE.
inline constexpr uint32_t kMigDisabled = 0;
inline constexpr uint32_t kMigEnabled = 1;

// NVML's compute-instance profile indices (NVML_COMPUTE_INSTANCE_PROFILE_*)
// this model offers: a compute instance of 1, 2, 3, 4 or 7 compute slices.
enum MigComputeProfileIndex : uint32_t {
  kMigCompute1Slice = 0x0,
  kMigCompute2Slice = 0x1,
  kMigCompute3Slice = 0x2,
  kMigCompute4Slice = 0x3,
  kMigCompute7Slice = 0x4,
};

// The compute slices of compute-instance profile `index`; 0 for an index
// this model does not offer.
uint32_t MigComputeSlices(uint32_t index);

// Where compute instances of `slices` may start in a GPU instance of
// `gi_slices` compute slices, lowest first: at multiples of the power of two
// not below `slices` (the instance counts NVIDIA's MIG user guide lists:
// seven 1c, three 2c, two 3c and one 4c in a 7g; one 3c in a 3g; two 2c in
// a 4g). Empty when it does not fit.
std::vector<uint32_t> ComputePlacementStarts(uint32_t slices, uint32_t gi_slices);

// The MIG geometry of device `d` (nullptr: the GPU has no MIG mode here).
const MigGeometry* GeometryOf(const DeviceState& d);

// Whether a context of any process is on device `dev`; `*by` names one.
bool DeviceInUse(const SimState& s, int dev, std::string* by = nullptr);

// nvmlDeviceSetMigMode: records `mode` as pending and applies it if the
// device is idle. Errors: Unimplemented (no MIG mode on this GPU),
// InvalidArgument (not kMigDisabled or kMigEnabled), FailedPrecondition
// (pending, not applied: the message says what uses the GPU).
Status SetMigMode(SimState& s, int dev, uint32_t mode);

// The existing GPU instances, for FreePlacements and RemainingCapacity.
std::vector<MigInstanceUse> GpuInstanceUses(const DeviceState& d);

// Creates a GPU instance of profile `index` (MigProfileIndex) at `placement`
// or, without one, at the lowest free placement, with the lowest free id
// from 1; returns its record's index in d.gpu_instances. Errors:
// FailedPrecondition (MIG mode is not enabled), InvalidArgument (no such
// profile on this GPU, or a placement it may not take), ResourceExhausted
// (no free placement, or the one asked for is taken).
StatusOr<int> CreateGpuInstance(DeviceState& d, uint32_t index,
                                std::optional<MigPlacement> placement = std::nullopt);
// NotFound (no such id), FailedPrecondition (it has compute instances).
Status DestroyGpuInstance(DeviceState& d, uint32_t gi_id);

// The record of GPU instance `gi_id`, nullptr if none.
MigGpuInstanceRecord* FindGpuInstance(DeviceState& d, uint32_t gi_id);
const MigGpuInstanceRecord* FindGpuInstance(const DeviceState& d, uint32_t gi_id);

// Creates a compute instance of profile `index` (MigComputeProfileIndex) in
// GPU instance `gi_id` at the lowest free placement, with the lowest free
// id from 0 and a UUID derived from the GPU's and the ids; returns its
// record's index in the GPU instance's `compute`. Errors: NotFound (no such
// GPU instance), InvalidArgument (no such profile, or larger than the GPU
// instance), ResourceExhausted (no free placement).
StatusOr<int> CreateComputeInstance(DeviceState& d, uint32_t gi_id, uint32_t index);
// The compute slices of GPU-instance record `gi` of `d`, and where a compute
// instance of `slices` may start beside its compute instances, lowest first
// (empty when none fits).
uint32_t GpuInstanceComputeSlices(const DeviceState& d, const MigGpuInstanceRecord& gi);
std::vector<uint32_t> FreeComputeStarts(const DeviceState& d, const MigGpuInstanceRecord& gi,
                                        uint32_t slices);
// How many more compute instances of `slices` fit in `gi`, placed one after
// another at the lowest free start (nvmlGpuInstanceGetComputeInstanceRemainingCapacity).
uint32_t ComputeRemainingCapacity(const DeviceState& d, const MigGpuInstanceRecord& gi,
                                  uint32_t slices);
// NotFound (no such GPU or compute instance), FailedPrecondition (a context
// is on it).
Status DestroyComputeInstance(SimState& s, int dev, uint32_t gi_id, uint32_t ci_id);

// The scheduling lane (state.h SchedLane) of the MIG device in compute
// instance record `ci` of GPU-instance record `gi`; lane 0 is the whole GPU.
inline int MigLane(int gi, int ci) { return 1 + gi * kMaxComputeInstances + ci; }
// The records of lane `lane` (> 0) of `d`, both nullptr unless in use.
struct MigLaneRecords {
  MigGpuInstanceRecord* gi = nullptr;
  MigComputeInstanceRecord* ci = nullptr;
};
MigLaneRecords LaneRecords(DeviceState& d, int lane);
// A MIG device's memory: its GPU instance's (its compute instances share
// it), what the contexts in that GPU instance hold, and what is left.
struct MigMemory {
  uint64_t total_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t free_bytes = 0;
};
MigMemory MigDeviceMemory(const SimState& s, int dev, const MigGpuInstanceRecord& gi);
// Whether a context is in lane `lane` of device `dev`.
bool LaneInUse(const SimState& s, int dev, int lane);

// A MIG device (a compute instance) by its UUID.
struct MigDeviceRef {
  int device = -1;  // index in SimState::devices
  int gi = -1;      // index in the device's gpu_instances
  int ci = -1;      // index in that GPU instance's compute
};
std::optional<MigDeviceRef> FindMigDevice(const SimState& s, std::string_view uuid);

// What a MIG device has: its GPU instance's memory and its compute slices'
// share of the GPU instance's SMs.
uint64_t MigDeviceMemoryBytes(const DeviceState& d, const MigGpuInstanceRecord& gi);
uint32_t MigDeviceSmCount(const DeviceState& d, const MigGpuInstanceRecord& gi,
                          const MigComputeInstanceRecord& ci);
// nvidia-smi's name of a MIG device: the GPU instance's profile ("3g.40gb"),
// preceded by the compute slices when the compute instance has fewer
// ("1c.3g.40gb").
std::string MigDeviceProfileName(const DeviceState& d, const MigGpuInstanceRecord& gi,
                                 const MigComputeInstanceRecord& ci);

}  // namespace gpuslice::sim
