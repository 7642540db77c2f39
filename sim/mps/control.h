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
// Not thread-safe: the daemon runs it on one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sim/mps/command.h"

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
  };
  struct Server {
    int32_t pid;
    uint32_t uid;
    ServerState state;
    double thread_percent;
    std::map<int, uint64_t> pinned;  // daemon ordinal -> bytes
    uint32_t next_client_id = 0;
    std::vector<Client> clients;
  };

  Reply Execute(const Command& c);
  Reply ClientConnect(const Command& c);
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
};

}  // namespace gpuslice::sim::mps
