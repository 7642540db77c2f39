#include "sim/smi/smi_mig.h"

#include <cstdlib>
#include <cstring>
#include <string_view>

namespace gpuslice::smi {
namespace {

constexpr char kMigUsage[] =
    "Usage: nvidia-smi mig [-i ID] ACTION\n"
    "  -lgip,  --list-gpu-instance-profiles            GPU-instance profiles\n"
    "  -lgipp, --list-gpu-instance-possible-placements their placements\n"
    "  -cgi,   --create-gpu-instance P[,P...]          create GPU instances (names or ids)\n"
    "  -C,     --default-compute-instance              with -cgi: a compute instance in each\n"
    "  -lgi,   --list-gpu-instances                    the GPU instances\n"
    "  -lci,   --list-compute-instances                the compute instances\n"
    "  -dci,   --destroy-compute-instance              destroy compute instances\n"
    "  -dgi,   --destroy-gpu-instance                  destroy GPU instances\n"
    "  -gi,    --gpu-instance-id IDS                   only these GPU instances\n"
    "  -ci,    --compute-instance-id IDS               only these compute instances\n";

// One GPU-instance profile of a GPU, as NVML describes it.
struct Profile {
  unsigned index = 0;  // NVML_GPU_INSTANCE_PROFILE_*
  nvmlGpuInstanceProfileInfo_v2_t info{};
  std::string name() const { return info.name; }  // "MIG 1g.10gb"
};

std::vector<Profile> Profiles(const NvmlApi& nvml, nvmlDevice_t dev) {
  std::vector<Profile> out;
  for (unsigned i = 0; i < NVML_GPU_INSTANCE_PROFILE_COUNT; ++i) {
    Profile p;
    p.index = i;
    p.info.version = nvmlGpuInstanceProfileInfo_v2;
    if (nvml.Call(&NvmlApi::nvmlDeviceGetGpuInstanceProfileInfoV, dev, i, &p.info) ==
        NVML_SUCCESS) {
      out.push_back(p);
    }
  }
  return out;
}

// "1g.10gb", "MIG 1g.10gb" or an id such as "19".
const Profile* FindProfile(const std::vector<Profile>& profiles, std::string_view key) {
  for (const Profile& p : profiles) {
    const std::string name = p.name();
    if (key == name || key == std::string_view(name).substr(4) ||
        key == std::to_string(p.info.id)) {
      return &p;
    }
  }
  return nullptr;
}

// Every GPU instance of `dev`, by profile.
std::vector<nvmlGpuInstance_t> GpuInstances(const NvmlApi& nvml, nvmlDevice_t dev,
                                            const std::vector<Profile>& profiles) {
  std::vector<nvmlGpuInstance_t> out;
  for (const Profile& p : profiles) {
    nvmlGpuInstance_t gis[8];
    unsigned count = 8;
    if (nvml.Call(&NvmlApi::nvmlDeviceGetGpuInstances, dev, p.info.id, gis, &count) ==
        NVML_SUCCESS) {
      out.insert(out.end(), gis, gis + count);
    }
  }
  return out;
}

// Every compute instance of `gi` (compute-instance profiles 0..7).
std::vector<nvmlComputeInstance_t> ComputeInstances(const NvmlApi& nvml, nvmlGpuInstance_t gi) {
  std::vector<nvmlComputeInstance_t> out;
  for (unsigned p = 0; p < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++p) {
    nvmlComputeInstance_t cis[8];
    unsigned count = 8;
    if (nvml.Call(&NvmlApi::nvmlGpuInstanceGetComputeInstances, gi, p, cis, &count) ==
        NVML_SUCCESS) {
      out.insert(out.end(), cis, cis + count);
    }
  }
  return out;
}

const Profile* ProfileOf(const std::vector<Profile>& profiles, unsigned id) {
  for (const Profile& p : profiles) {
    if (p.info.id == id) return &p;
  }
  return nullptr;
}

// The compute-instance profile that fills a GPU instance of `slices`.
unsigned FullComputeProfile(unsigned slices) {
  switch (slices) {
    case 1:
      return 0;
    case 2:
      return 1;
    case 3:
      return 2;
    case 4:
      return 3;
    default:
      return 4;  // 7
  }
}

bool Wanted(const std::vector<unsigned>& ids, unsigned id) {
  if (ids.empty()) return true;
  for (unsigned want : ids) {
    if (want == id) return true;
  }
  return false;
}

constexpr char kRule[] =
    "+-----------------------------------------------------------------------------+\n";

SmiResult ListProfiles(const NvmlApi& nvml, const std::vector<Gpu>& gpus) {
  SmiResult r;
  r.out += kRule;
  r.out += "| GPU instance profiles:                                                      |\n";
  r.out += "| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |\n";
  r.out += "|                              Free/Total   GiB              CE    JPEG  OFA  |\n";
  r.out += "|=============================================================================|\n";
  for (const Gpu& g : gpus) {
    for (const Profile& p : Profiles(nvml, g.handle)) {
      unsigned free = 0;
      nvml.Call(&NvmlApi::nvmlDeviceGetGpuInstanceRemainingCapacity, g.handle, p.info.id, &free);
      r.out += Format("| %3u  %-16s %3u   %3u/%-3u    %7.2f     %-3s  %5u %5u %5u   |\n", g.index,
                      p.info.name, p.info.id, free, p.info.instanceCount,
                      static_cast<double>(p.info.memorySizeMB) / 1024.0,
                      p.info.isP2pSupported != 0 ? "Yes" : "No", p.info.multiprocessorCount,
                      p.info.decoderCount, p.info.encoderCount);
      r.out += Format("|                                                         %5u %5u %5u   |\n",
                      p.info.copyEngineCount, p.info.jpegCount, p.info.ofaCount);
    }
  }
  r.out += kRule;
  return r;
}

SmiResult ListPlacements(const NvmlApi& nvml, const std::vector<Gpu>& gpus) {
  SmiResult r;
  for (const Gpu& g : gpus) {
    for (const Profile& p : Profiles(nvml, g.handle)) {
      nvmlGpuInstancePlacement_t at[8];
      unsigned count = 8;
      if (nvml.Call(&NvmlApi::nvmlDeviceGetGpuInstancePossiblePlacements_v2, g.handle, p.info.id,
                    at, &count) != NVML_SUCCESS) {
        continue;
      }
      std::string starts;
      for (unsigned i = 0; i < count; ++i)
        starts += (i > 0 ? "," : "") + std::to_string(at[i].start);
      r.out += Format("GPU %2u Profile ID %2u Placements: {%s}:%u\n", g.index, p.info.id,
                      starts.c_str(), count > 0 ? at[0].size : 0);
    }
  }
  return r;
}

void Failed(SmiResult* r, nvmlReturn_t rc, const std::string& message, const NvmlApi& nvml) {
  r->err += message + ": " + nvml.ErrorString(rc) + "\n";
  r->exit_code = ExitCodeFor(rc);
}

SmiResult Create(const SmiOptions& o, const NvmlApi& nvml, const std::vector<Gpu>& gpus) {
  SmiResult r;
  for (const Gpu& g : gpus) {
    const std::vector<Profile> profiles = Profiles(nvml, g.handle);
    for (const std::string& key : o.mig_profiles) {
      const Profile* p = FindProfile(profiles, key);
      if (p == nullptr) {
        return Fail(kExitInvalidArgument, "Unable to find profile '" + key + "' on GPU " +
                                              std::to_string(g.index) + ".\n");
      }
      nvmlGpuInstance_t gi = nullptr;
      nvmlReturn_t rc = nvml.Call(&NvmlApi::nvmlDeviceCreateGpuInstance, g.handle, p->info.id, &gi);
      if (rc != NVML_SUCCESS) {
        Failed(&r, rc,
               Format("Unable to create a GPU instance on GPU %2u using profile %u", g.index,
                      p->info.id),
               nvml);
        continue;
      }
      nvmlGpuInstanceInfo_t info{};
      nvml.Call(&NvmlApi::nvmlGpuInstanceGetInfo, gi, &info);
      r.out +=
          Format("Successfully created GPU instance ID %2u on GPU %2u using profile %s (ID %2u)\n",
                 info.id, g.index, p->info.name, p->info.id);
      if (!o.mig_default_ci) continue;
      const unsigned ci_profile = FullComputeProfile(p->info.sliceCount);
      nvmlComputeInstance_t ci = nullptr;
      rc = nvml.Call(&NvmlApi::nvmlGpuInstanceCreateComputeInstance, gi, ci_profile, &ci);
      if (rc != NVML_SUCCESS) {
        Failed(&r, rc,
               Format("Unable to create a compute instance on GPU %2u GPU instance ID %2u", g.index,
                      info.id),
               nvml);
        continue;
      }
      nvmlComputeInstanceInfo_t ci_info{};
      nvml.Call(&NvmlApi::nvmlComputeInstanceGetInfo_v2, ci, &ci_info);
      r.out += Format(
          "Successfully created compute instance ID %2u on GPU %2u GPU instance ID %2u using "
          "profile %s (ID %2u)\n",
          ci_info.id, g.index, info.id, p->info.name, ci_profile);
    }
  }
  return r;
}

SmiResult ListGpuInstances(const NvmlApi& nvml, const std::vector<Gpu>& gpus) {
  constexpr char kGiRule[] = "+-------------------------------------------------------+\n";
  SmiResult r;
  r.out += kGiRule;
  r.out += "| GPU instances:                                        |\n";
  r.out += "| GPU   Name             Profile  Instance   Placement  |\n";
  r.out += "|                          ID       ID       Start:Size |\n";
  r.out += "|=======================================================|\n";
  bool any = false;
  for (const Gpu& g : gpus) {
    const std::vector<Profile> profiles = Profiles(nvml, g.handle);
    for (nvmlGpuInstance_t gi : GpuInstances(nvml, g.handle, profiles)) {
      nvmlGpuInstanceInfo_t info{};
      if (nvml.Call(&NvmlApi::nvmlGpuInstanceGetInfo, gi, &info) != NVML_SUCCESS) continue;
      const Profile* p = ProfileOf(profiles, info.profileId);
      r.out += Format("| %3u  %-16s  %5u    %5u        %u:%-4u  |\n", g.index,
                      p != nullptr ? p->info.name : "?", info.profileId, info.id,
                      info.placement.start, info.placement.size);
      any = true;
    }
  }
  if (!any) return Fail(kExitQueryFailed, "No GPU instances found: Not Found\n");
  r.out += kGiRule;
  return r;
}

SmiResult ListComputeInstances(const NvmlApi& nvml, const std::vector<Gpu>& gpus) {
  constexpr char kCiRule[] =
      "+--------------------------------------------------------------------+\n";
  SmiResult r;
  r.out += kCiRule;
  r.out += "| Compute instances:                                                 |\n";
  r.out += "| GPU     GPU       Name             Profile   Instance   Placement  |\n";
  r.out += "|       Instance                       ID        ID       Start:Size |\n";
  r.out += "|         ID                                                         |\n";
  r.out += "|====================================================================|\n";
  bool any = false;
  for (const Gpu& g : gpus) {
    const std::vector<Profile> profiles = Profiles(nvml, g.handle);
    for (nvmlGpuInstance_t gi : GpuInstances(nvml, g.handle, profiles)) {
      nvmlGpuInstanceInfo_t gi_info{};
      if (nvml.Call(&NvmlApi::nvmlGpuInstanceGetInfo, gi, &gi_info) != NVML_SUCCESS) continue;
      const Profile* p = ProfileOf(profiles, gi_info.profileId);
      for (nvmlComputeInstance_t ci : ComputeInstances(nvml, gi)) {
        nvmlComputeInstanceInfo_t info{};
        if (nvml.Call(&NvmlApi::nvmlComputeInstanceGetInfo_v2, ci, &info) != NVML_SUCCESS) {
          continue;
        }
        // "MIG 3g.40gb", or "MIG 1c.3g.40gb" for a part of the GPU instance.
        std::string name = p != nullptr ? p->name() : "MIG ?";
        if (p != nullptr && info.placement.size < p->info.sliceCount) {
          name = "MIG " + std::to_string(info.placement.size) + "c." + name.substr(4);
        }
        r.out += Format("| %3u    %4u       %-16s  %5u     %5u        %u:%-4u  |\n", g.index,
                        gi_info.id, name.c_str(), info.profileId, info.id, info.placement.start,
                        info.placement.size);
        any = true;
      }
    }
  }
  if (!any) return Fail(kExitQueryFailed, "No compute instances found: Not Found\n");
  r.out += kCiRule;
  return r;
}

SmiResult Destroy(const SmiOptions& o, const NvmlApi& nvml, const std::vector<Gpu>& gpus,
                  bool compute) {
  SmiResult r;
  bool any = false;
  for (const Gpu& g : gpus) {
    const std::vector<Profile> profiles = Profiles(nvml, g.handle);
    for (nvmlGpuInstance_t gi : GpuInstances(nvml, g.handle, profiles)) {
      nvmlGpuInstanceInfo_t gi_info{};
      if (nvml.Call(&NvmlApi::nvmlGpuInstanceGetInfo, gi, &gi_info) != NVML_SUCCESS ||
          !Wanted(o.gi_ids, gi_info.id)) {
        continue;
      }
      if (!compute) {
        any = true;
        const nvmlReturn_t rc = nvml.Call(&NvmlApi::nvmlGpuInstanceDestroy, gi);
        if (rc != NVML_SUCCESS) {
          Failed(&r, rc,
                 Format("Unable to destroy GPU instance ID %2u from GPU %2u", gi_info.id, g.index),
                 nvml);
          continue;
        }
        r.out += Format("Successfully destroyed GPU instance ID %2u from GPU %2u\n", gi_info.id,
                        g.index);
        continue;
      }
      for (nvmlComputeInstance_t ci : ComputeInstances(nvml, gi)) {
        nvmlComputeInstanceInfo_t info{};
        if (nvml.Call(&NvmlApi::nvmlComputeInstanceGetInfo_v2, ci, &info) != NVML_SUCCESS ||
            !Wanted(o.ci_ids, info.id)) {
          continue;
        }
        any = true;
        const nvmlReturn_t rc = nvml.Call(&NvmlApi::nvmlComputeInstanceDestroy, ci);
        if (rc != NVML_SUCCESS) {
          Failed(
              &r, rc,
              Format("Unable to destroy compute instance ID %2u from GPU %2u GPU instance ID %2u",
                     info.id, g.index, gi_info.id),
              nvml);
          continue;
        }
        r.out += Format(
            "Successfully destroyed compute instance ID %2u from GPU %2u GPU instance ID %2u\n",
            info.id, g.index, gi_info.id);
      }
    }
  }
  if (!any) {
    return Fail(kExitQueryFailed, std::string("No ") + (compute ? "compute" : "GPU") +
                                      " instances found: Not Found\n");
  }
  return r;
}

// "1,2" -> {1, 2}; false on anything but unsigned numbers.
bool ParseIds(const std::string& list, std::vector<unsigned>* out) {
  for (const std::string& part : SplitCommas(list)) {
    char* end = nullptr;
    const unsigned long v = strtoul(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v > 0xffff) return false;
    out->push_back(static_cast<unsigned>(v));
  }
  return true;
}

std::string BusId(const NvmlApi& nvml, const Gpu& g) {
  nvmlPciInfo_t pci;
  memset(&pci, 0, sizeof pci);
  if (nvml.Call(&NvmlApi::nvmlDeviceGetPciInfo_v3, g.handle, &pci) != NVML_SUCCESS) {
    return std::to_string(g.index);
  }
  return pci.busId;
}

}  // namespace

// nvidia-smi -mig: each selected GPU's mode; a GPU in use keeps the change
// pending (a warning, not a failure, as NVIDIA's tool does).
SmiResult RunMigMode(const SmiOptions& o, const NvmlApi& nvml, const std::vector<Gpu>& gpus) {
  SmiResult out;
  const char* verb = o.mig_mode == 1 ? "enable" : "disable";
  for (const Gpu& g : gpus) {
    const std::string bus = BusId(nvml, g);
    nvmlReturn_t activation = NVML_SUCCESS;
    const nvmlReturn_t r = nvml.Call(&NvmlApi::nvmlDeviceSetMigMode, g.handle,
                                     static_cast<unsigned int>(o.mig_mode), &activation);
    if (r != NVML_SUCCESS) {
      return Fail(ExitCodeFor(r), Format("Unable to %s MIG Mode for GPU %s: %s\n", verb,
                                         bus.c_str(), nvml.ErrorString(r)));
    }
    if (activation == NVML_SUCCESS) {
      out.out +=
          Format("%s MIG Mode for GPU %s\n", o.mig_mode == 1 ? "Enabled" : "Disabled", bus.c_str());
      continue;
    }
    out.out += Format("Warning: MIG mode is in pending %s state for GPU %s:%s\n", verb, bus.c_str(),
                      nvml.ErrorString(activation));
    out.out += Format(
        "%s is in use by one or more processes; stop them and run the command "
        "again to make the MIG mode change take effect.\n",
        bus.c_str());
  }
  out.out += "All done.\n";
  return out;
}

std::string MigHelp() { return kMigUsage; }

bool ParseMigArgs(const std::vector<std::string>& args, SmiOptions* o, SmiResult* result) {
  auto bad = [&](std::string message) {
    *result = Fail(kExitInvalidArgument, std::move(message) + kMigUsage);
    return false;
  };
  o->mig = true;
  auto action = [&](const char* name) {
    if (!o->mig_action.empty()) return false;
    o->mig_action = name;
    return true;
  };
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    if (a == "-h" || a == "--help") {
      o->help = true;
    } else if (a == "-i" || a == "--id") {
      if (!has_value) return bad("-i needs a GPU.\n");
      for (std::string& id : SplitCommas(args[++i])) o->ids.push_back(std::move(id));
    } else if (a == "-lgip" || a == "--list-gpu-instance-profiles") {
      if (!action("-lgip")) return bad("one action at a time.\n");
    } else if (a == "-lgipp" || a == "--list-gpu-instance-possible-placements") {
      if (!action("-lgipp")) return bad("one action at a time.\n");
    } else if (a == "-lgi" || a == "--list-gpu-instances") {
      if (!action("-lgi")) return bad("one action at a time.\n");
    } else if (a == "-lci" || a == "--list-compute-instances") {
      if (!action("-lci")) return bad("one action at a time.\n");
    } else if (a == "-dci" || a == "--destroy-compute-instance") {
      if (!action("-dci")) return bad("one action at a time.\n");
    } else if (a == "-dgi" || a == "--destroy-gpu-instance") {
      if (!action("-dgi")) return bad("one action at a time.\n");
    } else if (a == "-cgi" || a == "--create-gpu-instance") {
      if (!action("-cgi") || !has_value) return bad("-cgi needs a list of profiles.\n");
      o->mig_profiles = SplitCommas(args[++i]);
    } else if (a == "-C" || a == "--default-compute-instance") {
      o->mig_default_ci = true;
    } else if (a == "-gi" || a == "--gpu-instance-id") {
      if (!has_value || !ParseIds(args[++i], &o->gi_ids)) return bad("-gi needs instance ids.\n");
    } else if (a == "-ci" || a == "--compute-instance-id") {
      if (!has_value || !ParseIds(args[++i], &o->ci_ids)) return bad("-ci needs instance ids.\n");
    } else {
      return bad("\"" + a + "\" is not a mig option.\n");
    }
  }
  if (o->help) return true;
  if (o->mig_action.empty()) return bad("name an action.\n");
  if (o->mig_default_ci && o->mig_action != "-cgi") return bad("-C goes with -cgi.\n");
  if (!o->ci_ids.empty() && o->mig_action != "-dci") return bad("-ci goes with -dci.\n");
  if (!o->gi_ids.empty() && o->mig_action != "-dci" && o->mig_action != "-dgi") {
    return bad("-gi goes with -dci or -dgi.\n");
  }
  for (const std::string& p : o->mig_profiles) {
    if (p.empty()) return bad("an empty profile in the -cgi list.\n");
  }
  return true;
}

SmiResult RunMig(const SmiOptions& o, const NvmlApi& nvml, const std::vector<Gpu>& gpus) {
  std::vector<Gpu> mig_gpus;
  for (const Gpu& g : gpus) {
    unsigned current = 0, pending = 0;
    if (nvml.Call(&NvmlApi::nvmlDeviceGetMigMode, g.handle, &current, &pending) == NVML_SUCCESS &&
        current == NVML_DEVICE_MIG_ENABLE) {
      mig_gpus.push_back(g);
    }
  }
  if (mig_gpus.empty()) return Fail(kExitQueryFailed, "No MIG-enabled devices found.\n");
  const std::string& a = o.mig_action;
  if (a == "-lgip") return ListProfiles(nvml, mig_gpus);
  if (a == "-lgipp") return ListPlacements(nvml, mig_gpus);
  if (a == "-cgi") return Create(o, nvml, mig_gpus);
  if (a == "-lgi") return ListGpuInstances(nvml, mig_gpus);
  if (a == "-lci") return ListComputeInstances(nvml, mig_gpus);
  return Destroy(o, nvml, mig_gpus, /*compute=*/a == "-dci");
}

std::string MigDeviceLines(const NvmlApi& nvml, const Gpu& gpu) {
  std::string out;
  for (unsigned i = 0;; ++i) {
    nvmlDevice_t mig = nullptr;
    if (nvml.Call(&NvmlApi::nvmlDeviceGetMigDeviceHandleByIndex, gpu.handle, i, &mig) !=
        NVML_SUCCESS) {
      break;
    }
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    nvml.Call(&NvmlApi::nvmlDeviceGetName, mig, name, static_cast<unsigned>(sizeof name));
    nvml.Call(&NvmlApi::nvmlDeviceGetUUID, mig, uuid, static_cast<unsigned>(sizeof uuid));
    // "NVIDIA H100 80GB HBM3 MIG 1g.10gb" -> "MIG 1g.10gb"
    const std::string_view full(name);
    const size_t at = full.find("MIG ");
    const std::string profile(at == std::string_view::npos ? full : full.substr(at));
    out += Format("  %-16s Device %2u: (UUID: %s)\n", profile.c_str(), i, uuid);
  }
  return out;
}

}  // namespace gpuslice::smi
