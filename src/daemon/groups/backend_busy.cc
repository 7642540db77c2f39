#include "daemon/groups/backend_busy.h"

namespace gpuslice::daemon {

StatusOr<std::vector<control::DeviceBusySample>> BackendBusy::BusySince(std::string_view uuid,
                                                                        uint64_t since_us) {
  auto it = index_.find(uuid);
  if (it == index_.end()) {
    for (uint32_t i = 0; i < backend_.DeviceCount(); ++i) {
      auto info = backend_.Read(i);
      if (info.ok()) index_.emplace(info->uuid, i);
    }
    it = index_.find(uuid);
    if (it == index_.end()) return NotFound("no GPU " + std::string(uuid));
  }
  GS_ASSIGN_OR_RETURN(std::vector<BusySample> samples, backend_.BusySince(it->second, since_us));
  std::vector<control::DeviceBusySample> out;
  out.reserve(samples.size());
  for (const BusySample& s : samples) out.push_back({s.timestamp_us, s.percent});
  return out;
}

}  // namespace gpuslice::daemon
