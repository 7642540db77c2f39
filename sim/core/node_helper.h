// NodeHelper: the simulator's node-side helper that tells a process its host
// pid, standing in for what NVIDIA's kernel module knows of every process.
//
// Protocol (one exchange per connection, on a Unix stream socket): the client
// connects and reads one NodeHelperReply; the helper takes the client's pid
// from SO_PEERCRED (the kernel translates it into the helper's pid namespace),
// reads that pid's start time from its own /proc and writes the reply. A
// client whose pid is not visible in the helper's namespace gets pid 0.
//
// The helper is meant to run in the node's (host's) pid namespace, beside the
// simulation's state file: `gpuslice-sim-node` (sim/bin) runs one. Its pid
// namespace is, by definition, the "host" of every process that asks it.
//
// Thread-safe: Start/Stop from one thread; the serving thread is internal.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace gpuslice::sim {

inline constexpr uint32_t kNodeHelperMagic = 0x4e534750;  // "PGSN"
inline constexpr uint32_t kNodeHelperVersion = 1;

struct NodeHelperReply {
  uint32_t magic;
  uint32_t version;
  int32_t pid;  // the client's pid in the helper's pid namespace; 0 if not visible there
  uint32_t pad;
  uint64_t start_time;  // /proc/<pid>/stat field 22 as the helper reads it
  uint64_t pid_ns;      // inode of the helper's pid namespace
};
static_assert(sizeof(NodeHelperReply) == 32);

class NodeHelper {
 public:
  // Binds `socket_path` (replacing a stale socket file; refusing, with
  // AlreadyExists, when another helper answers there) and starts serving.
  static StatusOr<std::unique_ptr<NodeHelper>> Start(const std::string& socket_path);
  ~NodeHelper();  // Stop()
  NodeHelper(const NodeHelper&) = delete;
  NodeHelper& operator=(const NodeHelper&) = delete;

  // Stops serving and removes the socket file. Idempotent.
  void Stop();
  uint64_t answered() const { return answered_.load(); }

 private:
  NodeHelper(std::string path, int fd);
  void Serve();

  std::string path_;
  int fd_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> answered_{0};
  std::thread thread_;
};

// Asks the helper at `socket_path`. NotFound when nothing listens there;
// Unavailable when it does not answer within `timeout_ms`, answers something
// malformed, or cannot see the caller (pid 0).
StatusOr<NodeHelperReply> AskNodeHelper(const std::string& socket_path, int timeout_ms);

}  // namespace gpuslice::sim
