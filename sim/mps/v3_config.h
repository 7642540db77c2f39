// The MPS v3 configuration file (`nvidia-cuda-mps-control -p 3 -a FILE`),
// checked against the documented schema (docs/sim-mps.md "MPS v3" lists the
// facts each rule follows):
//   schema_version = "1.0"                      (required)
//   [servers.<name>]   allowed_devices (string, comma-separated UUIDs),
//                      pinned_memory_limit (string, "10G"/"900M"),
//                      active_thread_percentage (string, "(0, 100]"),
//                      client_priority (string, "0"/"1"), uid (integer),
//                      locality_domains (boolean); nothing else.
//   [servers.<name>.namespaces.<ns>]  pinned_memory_limit,
//                      active_thread_percentage, client_priority; nothing
//                      else. A namespace named "default" configures the
//                      server's implicit default namespace.
//   [[servers.<name>.devices]]  uuid; and [[...devices.sm_partitions]] with
//                      name, chunks (integer > 0), include_remainder (bool).
//   [features.memacct] enabled, audit_log; [features.context-share]
//                      enabled, default_socket ("on"/"off").
// Any other key or table is an error, as are wrong types and values.
//
// Pure; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuslice::sim::mps {

// What a namespace (or a server, for its default namespace) gives its clients.
struct V3Limits {
  std::optional<double> thread_percent;
  std::optional<uint64_t> pinned_bytes;  // per device
  std::optional<uint32_t> priority;
};

struct V3SmPartition {
  std::string name;
  uint32_t chunks = 0;
  bool include_remainder = false;
};

struct V3Device {
  std::string uuid;
  std::vector<V3SmPartition> sm_partitions;
};

struct V3Server {
  std::string name;
  std::vector<std::string> allowed_devices;  // empty: every device of the daemon
  V3Limits limits;                           // the server's (default namespace's) limits
  std::optional<uint32_t> uid;
  bool locality_domains = false;
  std::map<std::string, V3Limits> namespaces;  // "default" included when configured
  std::vector<V3Device> devices;
};

struct V3Config {
  std::string schema_version;
  std::vector<V3Server> servers;  // by name
  bool memacct = false;
  bool memacct_audit_log = false;
  bool context_share = false;
  std::string context_share_default_socket;
};

// InvalidArgument naming the key (and line) on the first violation.
StatusOr<V3Config> ParseV3Config(std::string_view text);

}  // namespace gpuslice::sim::mps
