// Attachment: what attaching a process to its group is (DESIGN.md sections 2
// and 3), apart from the process-wide state that keeps it (process_state.h).
//
//  1. The devices: the driver's ordinals and UUIDs, from a CUDA driver table
//     (CudaDevices) or, for a process that never initialises CUDA, from an
//     NVML table (NvmlDevices). A table is the real library's (real_driver.h)
//     or a test's own.
//  2. The settings: the limits, the group and the schedule
//     (core/limit_config.h), where gpusliced is (daemon_client.h), what a
//     context is charged first (GPUSLICE_CONTEXT_BYTES,
//     core/context_charges.h), how long the first registration's answer is
//     waited for (GPUSLICE_REGISTER_WAIT_MS) and what registration says
//     (nothing when GPUSLICE_REGISTER is 0, false, off or no), all from one
//     environment lookup.
//  3. The group: its segment in GPUSLICE_SHM_DIR (default /dev/shm/gpuslice),
//     created if absent, each device attached by UUID and its limits lowered
//     to the process's, and the members that died since the last look reaped.
//
// Any error of 2 or 3 is a configuration error: the caller fails closed with
// the message. Nothing here reads a global: the environment, the cgroup text
// and the pids are arguments.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/daemon_address.h"
#include "common/status.h"
#include "cuda_abi/cuda_driver_api.h"
#include "limiter/core/context_charges.h"
#include "limiter/core/limit_config.h"
#include "limiter/daemon_client.h"
#include "limiter/real/real_driver.h"
#include "limiter/registration_thread.h"
#include "shm/group_segment.h"

namespace gpuslice::limiter {

// A device as the driver numbers it: (ordinal or NVML index, "GPU-<uuid>").
using DriverDevice = std::pair<int, std::string>;

// The devices `cu` lists. The driver's error where it fails; without the
// entry points, CUDA_ERROR_NOT_INITIALIZED (no library) or
// CUDA_ERROR_NOT_SUPPORTED (a library without them).
CUresult CudaDevices(const real::CudaTable& cu, std::vector<DriverDevice>* out);
// The devices `nv` lists; false where it cannot say.
bool NvmlDevices(const real::NvmlTable& nv, std::vector<DriverDevice>* out);

// "GPU-" and the 16 bytes in the 8-4-4-4-12 grouping, lower-case hex.
std::string FormatUuid(const CUuuid& uuid);

// Variables read by ReadAttachSettings, besides those of ParseLimitConfig
// and DaemonAddressFromEnv.
inline constexpr std::string_view kEnvContextBytes = "GPUSLICE_CONTEXT_BYTES";
inline constexpr std::string_view kEnvRegisterWaitMs = "GPUSLICE_REGISTER_WAIT_MS";
inline constexpr std::string_view kEnvRegister = "GPUSLICE_REGISTER";

struct AttachSettings {
  LimitConfig config;    // limits parallel to the devices, group, schedule
  DaemonAddress daemon;  // where registration goes
  std::optional<RegistrationRequest> registration;  // nullopt: registration disabled
  std::chrono::milliseconds registration_wait = kDefaultFirstAnswerWait;
  ContextCharges::Options context;
  std::string shm_dir;  // the group segments' directory
};

// The settings for `devices` from `env`. `cgroup_text` is /proc/self/cgroup
// (the default group), `pid` the process's own, `outermost_pid` its pid in
// the outermost pid namespace /proc shows (what a daemon reached over TCP is
// told). InvalidArgument naming the variable for a bad value.
StatusOr<AttachSettings> ReadAttachSettings(const EnvLookup& env,
                                            const std::vector<DriverDevice>& devices,
                                            std::string_view cgroup_text, int pid,
                                            int32_t outermost_pid);

struct Attachment {
  std::unique_ptr<GroupSegment> segment;
  std::vector<int> ordinal_to_device;  // parallel to the devices: each one's group device
};

// Opens the group's segment and attaches `devices`, lowering each one's
// limits to the settings'. The error names the group or the device.
StatusOr<Attachment> AttachToGroup(const AttachSettings& settings,
                                   const std::vector<DriverDevice>& devices);

}  // namespace gpuslice::limiter
