// MpsControl: the state and command execution of the simulated
// nvidia-cuda-mps-control daemon, free of side effects: servers are started
// and stopped, processes checked and clients terminated through an MpsHost,
// so unit tests drive it with a fake host.
//
// Model (as NVIDIA's daemon): one server at a time per daemon (one user's);
// it starts on the first client connection or start_server and serves every
// device the daemon was started with. A server takes the daemon's defaults
// (thread percentage, pinned memory limits, client priority) when it starts;
// set_* on a server changes what its *new* clients get. A client's limits are
// fixed when it connects. Dead clients are forgotten at the next command.
//
// Reply formats (one line per item, "\n"-terminated; set_* print nothing on
// success; an error is one line starting with "Error:"):
//   get_server_list            <server pid> per line
//   get_server_status P        INITIALIZING | ACTIVE | FAULT
//   get_client_list P          <client pid> per line
//   get_device_client_list [P] per device with clients: "<device UUID>" then
//                              "  <client pid>" per client
//   get_*_thread_percentage    "100.0"
//   get_*_pinned_mem_limit     "10G", "900M", or "0" (no limit)
//   get_default_client_priority "0" or "1"
//   ps [-p P]                  a header "PID ID SERVER DEVICE NAMESPACE COMMAND"
//                              and a row per client
//
// MPS v3 (EnableV3; docs/sim-mps.md "MPS v3" names the documented fact behind
// each rule and the parameters where the documentation is silent): the
// configured servers are named and start on their first client (uid from the
// configuration, else the client's); a client names its server and
// namespace by the socket it connects to (route "server[/namespace]"; none:
// the first server whose uid is the client's, else the legacy server). Its
// limits are the daemon's defaults, replaced by the server's, capped by the
// namespace's (a namespace caps: a client's own variables can only lower
// them). A client may name one of its device's static SM partitions: its
// thread percentage is then capped at the partition's share of the SMs
// (chunks x sms_per_chunk, the remainder to the partition that takes it).
// A v3 daemon also speaks every v2 command; a v2 daemon refuses v3 verbs.
// Replies of the v3 verbs (one line per item):
//   server list                 "<name> <pid|-> <state|STOPPED>"
//   namespace list --server=S   "<namespace> <percent> <pinned> <priority>"
//                               ("default" first; "-" where not set)
//   sm_partition list --server=S "<device UUID> <partition> <SMs>"
//   client list --all           "<pid> <server|-> <namespace> <device UUID>
//                                <percent> <pinned bytes>"
//   namespace create|set|delete  nothing on success (created namespaces last
//                                as long as the daemon; set changes what new
//                                clients get, as set_* do in v2)
//   sm_partition info --server=S "<device UUID> <SMs> <SMs per chunk> <free chunks>"
//   sm_partition create|delete   nothing on success; a partition made at run
//                                time lasts as long as the daemon
// A client in a static partition runs on exactly the partition's SMs (fewer
// only where its thread percentage gives fewer); its connect reply then
// carries that SM count as a fifth field.
//
// Not thread-safe: the daemon runs it on one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sim/mps/command.h"
#include "sim/mps/v3_config.h"

namespace gpuslice::sim::mps {

// What the daemon does to the world.
class MpsHost {
 public:
  virtual ~MpsHost() = default;
  // Starts an nvidia-cuda-mps-server for `uid` serving the daemon's devices;
  // returns its pid once it is ready to accept clients.
  virtual StatusOr<int32_t> StartServer(uint32_t uid) = 0;
  // Stops a server started by StartServer (waits for it to exit).
  virtual void StopServer(int32_t pid) = 0;
  // True while `pid` is the process it was when first seen (see process.h).
  virtual bool Alive(int32_t pid) = 0;
  virtual std::string CommandName(int32_t pid) = 0;
  virtual uint64_t PidNamespace(int32_t pid) = 0;
  // terminate_client's effect on the GPU: the client's work and memory go.
  virtual void TerminateClient(int32_t server_pid, int32_t client_pid) = 0;
  // control.log: one message (the host adds time stamp and pid).
  virtual void Log(std::string_view message) = 0;
  // MPS v3: a namespace created at run time gets its routing socket
  // <pipe>/<server>/<ns>/control; a deleted one loses it.
  virtual Status AddRoute(const std::string& /*server*/, const std::string& /*ns*/) {
    return Status::Ok();
  }
  virtual void RemoveRoute(const std::string& /*server*/, const std::string& /*ns*/) {}
};

// What MPS v3 needs besides the configuration.
struct V3Setup {
  V3Config config;
  // SMs per static partition chunk: not documented (hardware dependent); a
  // parameter (GPUSLICE_SIM_MPS_SMS_PER_CHUNK for the daemon).
  uint32_t sms_per_chunk = 8;
  // The SM count of each of the daemon's devices, in its ordinal order.
  std::vector<uint32_t> device_sms;
};

struct Reply {
  std::string text;   // what the control client prints
  bool quit = false;  // the daemon should exit after sending it
};

class MpsControl {
 public:
  // `device_uuids`: the daemon's devices (from CUDA_VISIBLE_DEVICES), in its
  // ordinal order; `device_indices` the simulator's index of each.
  MpsControl(MpsHost* host, std::vector<int> device_indices, std::vector<std::string> device_uuids);

  // Selects protocol 3 with `setup`, checked against the daemon's devices:
  // InvalidArgument when a server allows, or a partition names, a device
  // the daemon does not have, or a device's partitions need more SMs than
  // it has. Call before the first Handle.
  Status EnableV3(V3Setup setup);
  int protocol() const { return v3_ ? 3 : 2; }

  // Executes one command line; never fails (errors are reply text).
  Reply Handle(std::string_view line);
  // Stops every server (quit, or the daemon being terminated).
  void Shutdown();

 private:
  enum class ServerState { kInitializing, kActive, kFault };
  struct Client {
    int32_t pid;
    int device;  // simulator index
    uint32_t id;
    uint32_t thread_percent;
    uint64_t pinned_bytes;
    uint32_t priority;
    std::string ns;         // v3: its namespace ("default" for the server's own)
    uint32_t sm_count = 0;  // v3: in a static SM partition, the SMs it runs on; else 0
  };
  struct Server {
    std::string name;  // v3: the configured server's name; "" for the legacy one
    int32_t pid;
    uint32_t uid;
    ServerState state;
    double thread_percent;
    std::map<int, uint64_t> pinned;  // daemon ordinal -> bytes
    uint32_t next_client_id = 0;
    std::vector<Client> clients;
  };

  Reply Execute(const Command& c);
  Reply ExecuteV3(const Command& c);
  Reply ClientConnect(const Command& c);
  // v3: the configured server `name`; null if none.
  const V3Server* ConfiguredServer(std::string_view name) const;
  V3Server* MutableServer(std::string_view name);
  // v3: the running server of configured `config`, started if need be.
  StatusOr<Server*> EnsureNamedServer(const V3Server& config, uint32_t client_uid);
  // v3: the SMs of `partition` on daemon ordinal `ordinal` of `config`; 0 if none.
  uint32_t PartitionSms(const V3Server& config, int ordinal, std::string_view partition) const;
  // v3: the chunks of daemon ordinal `ordinal` no partition of `config` holds.
  uint32_t FreeChunks(const V3Server& config, int ordinal) const;
  StatusOr<Server*> EnsureServer(uint32_t uid);
  Server* FindServer(int32_t pid);
  void Forget();  // drops dead clients; marks dead servers FAULT
  int OrdinalOf(int device_index) const;

  MpsHost* host_;
  std::vector<int> device_indices_;
  std::vector<std::string> device_uuids_;
  double default_thread_percent_ = 100;
  std::map<int, uint64_t> default_pinned_;  // daemon ordinal -> bytes
  uint32_t default_priority_ = 0;
  std::vector<Server> servers_;
  bool v3_ = false;
  V3Setup v3_setup_;
};

}  // namespace gpuslice::sim::mps
