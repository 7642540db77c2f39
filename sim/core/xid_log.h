// The simulated GPU's XID errors (docs/sim-nvml.md "XID errors"): a control file
// beside the simulation's state file, "<state path>.xid", to which
// `gpuslice sim xid` appends one line per error, "<device index> <xid>\n".
// The simulated NVML delivers the lines appended after a device was
// registered in an event set (nvmlDeviceRegisterEvents) as
// nvmlEventTypeXidCriticalError events (nvmlEventSetWait_v2).
//
// Appends are single write(2)s of one short line with O_APPEND, so
// concurrent writers never interleave; readers take complete lines only.
// Thread-safe (no state of its own).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpuslice::sim {

std::string XidLogPath(const std::string& state_path);

// Appends device `device`'s XID `xid`. kInvalidArgument for a negative
// device; the error of open/write otherwise.
Status AppendXid(const std::string& state_path, int device, uint32_t xid);

struct XidRecord {
  uint64_t offset = 0;  // of its line in the file
  int device = 0;
  uint32_t xid = 0;
};

// The complete lines from byte `from` on (malformed ones skipped); `*next`
// becomes the offset after the last complete line. No file: none, *next =
// from.
std::vector<XidRecord> ReadXids(const std::string& state_path, uint64_t from, uint64_t* next);

// The file's size now (0 when there is none): where a new registration starts.
uint64_t XidLogSize(const std::string& state_path);

}  // namespace gpuslice::sim
