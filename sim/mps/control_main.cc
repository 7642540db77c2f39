// nvidia-cuda-mps-control for the simulated GPU.
//
//   nvidia-cuda-mps-control -d   start the daemon in the background; returns 0
//                                once it accepts commands, 1 with a message if not
//   nvidia-cuda-mps-control -f   run the daemon in the foreground
//   nvidia-cuda-mps-control      client mode: commands on stdin, replies on stdout
//   nvidia-cuda-mps-control -q   quit the daemon
//   nvidia-cuda-mps-control VERB...  one MPS v3 command ("server list")
// With -d or -f: -p/--protocol 2|3 (MPS v3: protocol 3; CUDA_MPS_PROTOCOL_VERSION
// wins over the flag), -a/--apply FILE (the v3 TOML configuration; needs
// protocol 3). See docs/sim-mps.md "MPS v3".
//
// Environment: CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps),
// CUDA_MPS_LOG_DIRECTORY (default /var/log/nvidia-mps), CUDA_VISIBLE_DEVICES
// (the daemon's devices: indices or UUIDs), CUDA_MPS_PROTOCOL_VERSION,
// GPUSLICE_SIM_MPS_SMS_PER_CHUNK (SMs per static partition chunk, default 8),
// and the simulator's variables.
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/process.h"
#include "sim/core/config.h"
#include "sim/core/sim_gpu.h"
#include "sim/mps/control.h"
#include "sim/mps/log_file.h"
#include "sim/mps/protocol.h"

namespace gpuslice::sim::mps {
namespace {

volatile sig_atomic_t g_stop = 0;
void OnStop(int /*signal*/) { g_stop = 1; }

std::string Errno(const std::string& what) { return what + ": " + strerror(errno); }

// mkdir -p with mode 0755 for what it creates.
Status MakeDirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      std::string part = dir.substr(0, i);
      if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
        return Unavailable(Errno("cannot create directory " + part));
      }
    }
  }
  return Status::Ok();
}

// The daemon's side effects on a real host with the simulated GPU.
class SimHost : public MpsHost {
 public:
  // Where routing sockets go (MPS v3); set once the daemon listens.
  std::string pipe_dir, socket_path;

  Status AddRoute(const std::string& server, const std::string& ns) override {
    const std::string dir = pipe_dir + "/" + server + "/" + ns;
    GS_RETURN_IF_ERROR(MakeDirs(dir));
    const std::string link = dir + "/control";
    unlink(link.c_str());
    if (symlink(socket_path.c_str(), link.c_str()) != 0) {
      return Unavailable(Errno("cannot create " + link));
    }
    return Status::Ok();
  }
  void RemoveRoute(const std::string& server, const std::string& ns) override {
    const std::string dir = pipe_dir + "/" + server + "/" + ns;
    unlink((dir + "/control").c_str());
    rmdir(dir.c_str());
  }

  SimHost(std::unique_ptr<SimGpu> gpu, std::vector<int> devices, LogFile* log)
      : gpu_(std::move(gpu)), devices_(std::move(devices)), log_(log) {}

  StatusOr<int32_t> StartServer(uint32_t uid) override {
    if (geteuid() != 0 && uid != geteuid()) {
      return PermissionDenied("cannot start a server for user " + std::to_string(uid) +
                              " without root");
    }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return Unavailable(Errno("cannot find this executable"));
    self[n] = '\0';
    std::string path(self);
    path = path.substr(0, path.rfind('/')) + "/nvidia-cuda-mps-server";
    std::string devices;
    for (int d : devices_) {
      if (!devices.empty()) devices += ',';
      devices += std::to_string(d);
    }

    int to_server[2], from_server[2];
    if (pipe2(to_server, O_CLOEXEC) != 0) return Unavailable(Errno("pipe"));
    if (pipe2(from_server, O_CLOEXEC) != 0) {
      close(to_server[0]);
      close(to_server[1]);
      return Unavailable(Errno("pipe"));
    }
    pid_t pid = fork();
    if (pid < 0) return Unavailable(Errno("fork"));
    if (pid == 0) {
      dup2(to_server[0], 0);
      dup2(from_server[1], 1);
      if (geteuid() == 0 && uid != 0 && setuid(uid) != 0) _exit(126);
      setenv("GPUSLICE_MPS_SERVER_DEVICES", devices.c_str(), 1);
      execl(path.c_str(), "nvidia-cuda-mps-server", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_server[0]);
    close(from_server[1]);
    // Ready when it says so; it writes "ready" or "error: ..." and a newline.
    std::string said;
    const int64_t deadline = MonotonicNs() + 20'000'000'000;
    while (said.find('\n') == std::string::npos && MonotonicNs() < deadline) {
      pollfd p{from_server[0], POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[256];
      ssize_t r = read(from_server[0], buf, sizeof buf);
      if (r <= 0) break;
      said.append(buf, static_cast<size_t>(r));
    }
    close(from_server[0]);
    if (said.rfind("ready", 0) != 0) {
      close(to_server[1]);
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      std::string why = said.empty() ? "it exited or did not become ready" : said;
      while (!why.empty() && why.back() == '\n') why.pop_back();
      return Unavailable("server " + std::to_string(pid) + ": " + why);
    }
    server_stdin_[pid] = to_server[1];
    start_times_[pid] = ProcessStartTime(pid);
    return pid;
  }

  void StopServer(int32_t pid) override {
    auto it = server_stdin_.find(pid);
    if (it != server_stdin_.end()) {
      close(it->second);  // EOF on its stdin: the server exits
      server_stdin_.erase(it);
    }
    const int64_t deadline = MonotonicNs() + 5'000'000'000;
    while (MonotonicNs() < deadline) {
      pid_t r = waitpid(pid, nullptr, WNOHANG);
      if (r == pid || (r < 0 && errno == ECHILD)) return;
      usleep(5000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }

  bool Alive(int32_t pid) override {
    auto [it, inserted] = start_times_.try_emplace(pid, 0);
    if (inserted) it->second = ProcessStartTime(pid);
    return it->second != 0 && ProcessAlive(pid, it->second);
  }

  std::string CommandName(int32_t pid) override {
    char name[64];
    ProcessName(pid, name, sizeof name);
    return name;
  }

  uint64_t PidNamespace(int32_t pid) override {
    struct stat st {};
    std::string path = "/proc/" + std::to_string(pid) + "/ns/pid";
    return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
  }

  void TerminateClient(int32_t server_pid, int32_t client_pid) override {
    gpu_->TerminateMpsClient(server_pid, client_pid);
  }

  void Log(std::string_view message) override { log_->Write("Control", message); }

 private:
  std::unique_ptr<SimGpu> gpu_;
  std::vector<int> devices_;
  LogFile* log_;
  std::map<int32_t, int> server_stdin_;
  std::map<int32_t, uint64_t> start_times_;
};

// The daemon's devices: CUDA_VISIBLE_DEVICES (indices or UUIDs) over the
// simulated ones; all when unset.
StatusOr<std::vector<int>> VisibleDevices(SimGpu& gpu) {
  std::vector<int> out;
  const char* env = getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr) {
    for (int i = 0; i < gpu.device_count(); ++i) out.push_back(i);
    return out;
  }
  std::string list(env);
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    int found = -1;
    for (int i = 0; i < gpu.device_count() && found < 0; ++i) {
      if (item == std::to_string(i) || std::string(gpu.device(i).uuid).starts_with(item)) {
        found = i;
      }
    }
    if (found < 0) {
      return InvalidArgument("CUDA_VISIBLE_DEVICES names no simulated device: '" + item + "'");
    }
    out.push_back(found);
  }
  if (out.empty()) return InvalidArgument("CUDA_VISIBLE_DEVICES selects no device");
  return out;
}

// How the daemon was asked to start.
struct StartOptions {
  int protocol = 2;
  std::string config_path;  // -a
};

struct Daemon {
  StartOptions start;
  std::vector<std::string> route_links;  // v3: <pipe>/<server>[/<ns>]/control
  int listen_fd = -1;
  int pid_fd = -1;
  std::string pipe_dir, pid_path, socket_path;
  std::unique_ptr<LogFile> log;
  std::unique_ptr<SimHost> host;
  std::unique_ptr<MpsControl> control;
};

// Everything up to accepting commands. Errors are printable.
Status SetUp(Daemon* d) {
  d->pipe_dir = PipeDirectory();
  const std::string log_dir = LogDirectory();
  GS_RETURN_IF_ERROR(MakeDirs(d->pipe_dir));
  GS_RETURN_IF_ERROR(MakeDirs(log_dir));
  d->pid_path = d->pipe_dir + "/" + kPidFileName;
  d->pid_fd = open(d->pid_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (d->pid_fd < 0) return Unavailable(Errno("cannot open " + d->pid_path));
  if (flock(d->pid_fd, LOCK_EX | LOCK_NB) != 0) {
    close(d->pid_fd);
    d->pid_fd = -1;
    return FailedPrecondition("An instance of this daemon is already running (pipe directory " +
                              d->pipe_dir + ")");
  }
  auto log = LogFile::Open(log_dir + "/control.log");
  if (!log.ok()) return log.status();
  d->log = std::move(*log);

  auto options = OptionsFromEnv();
  if (!options.ok()) return options.status();
  options->observer = true;
  auto gpu = SimGpu::Open(*options);
  if (!gpu.ok()) return gpu.status();
  auto devices = VisibleDevices(**gpu);
  if (!devices.ok()) return devices.status();
  std::vector<std::string> uuids;
  for (int i : *devices) uuids.emplace_back((*gpu)->device(i).uuid);

  d->socket_path = SocketPath(d->pipe_dir);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (d->socket_path.size() >= sizeof addr.sun_path) {
    return InvalidArgument("pipe directory path too long for a socket: " + d->pipe_dir);
  }
  memcpy(addr.sun_path, d->socket_path.c_str(), d->socket_path.size() + 1);
  unlink(d->socket_path.c_str());  // stale: we hold the pid file lock
  d->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (d->listen_fd < 0 ||
      bind(d->listen_fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(d->listen_fd, 64) != 0) {
    return Unavailable(Errno("cannot listen on " + d->socket_path));
  }
  chmod(d->socket_path.c_str(), 0666);

  std::vector<uint32_t> device_sms;
  for (int i : *devices) device_sms.push_back((*gpu)->device(i).sm_count);
  d->host = std::make_unique<SimHost>(std::move(*gpu), *devices, d->log.get());
  d->host->pipe_dir = d->pipe_dir;
  d->host->socket_path = d->socket_path;
  d->control = std::make_unique<MpsControl>(d->host.get(), *devices, std::move(uuids));
  if (d->start.protocol == 3) {
    V3Setup setup;
    setup.device_sms = std::move(device_sms);
    if (const char* p = getenv("GPUSLICE_SIM_MPS_SMS_PER_CHUNK"); p != nullptr && *p != '\0') {
      char* end = nullptr;
      const unsigned long n = strtoul(p, &end, 10);
      if (*end != '\0' || n == 0 || n > 1024) {
        return InvalidArgument("GPUSLICE_SIM_MPS_SMS_PER_CHUNK: '" + std::string(p) +
                               "' is not a number in [1, 1024]");
      }
      setup.sms_per_chunk = static_cast<uint32_t>(n);
    }
    if (!d->start.config_path.empty()) {
      std::ifstream in(d->start.config_path);
      if (!in) return NotFound("cannot read configuration file " + d->start.config_path);
      std::stringstream text;
      text << in.rdbuf();
      auto config = ParseV3Config(text.str());
      if (!config.ok()) {
        return InvalidArgument(d->start.config_path + ": " + config.status().message());
      }
      setup.config = std::move(*config);
    }
    // Namespace routing: a socket per server and namespace under the pipe
    // directory (links to the daemon's one socket; see client.cc).
    for (const V3Server& server : setup.config.servers) {
      std::vector<std::string> dirs = {d->pipe_dir + "/" + server.name,
                                       d->pipe_dir + "/" + server.name + "/default"};
      for (const auto& [ns, limits] : server.namespaces) {
        dirs.push_back(d->pipe_dir + "/" + server.name + "/" + ns);
      }
      for (const std::string& dir : dirs) {
        GS_RETURN_IF_ERROR(MakeDirs(dir));
        const std::string link = dir + "/control";
        unlink(link.c_str());
        if (symlink(d->socket_path.c_str(), link.c_str()) != 0) {
          return Unavailable(Errno("cannot create " + link));
        }
        d->route_links.push_back(link);
      }
    }
    GS_RETURN_IF_ERROR(d->control->EnableV3(std::move(setup)));
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(d->pid_fd, 0) != 0 || pwrite(d->pid_fd, pid.data(), pid.size(), 0) < 0) {
    return Unavailable(Errno("cannot write " + d->pid_path));
  }
  d->log->Write("Control", "Starting control daemon using socket " + d->socket_path);
  d->log->Write("Control",
                "To connect CUDA applications to this daemon, set env "
                "CUDA_MPS_PIPE_DIRECTORY=" +
                    d->pipe_dir);
  return Status::Ok();
}

// Reads one request line from a fresh connection (bounded wait), answers it.
// Returns true when the daemon should exit.
bool Serve(Daemon& d, int fd) {
  std::string line;
  const int64_t deadline = MonotonicNs() + 2'000'000'000;
  while (line.find('\n') == std::string::npos && line.size() < 4096) {
    const int64_t left_ms = (deadline - MonotonicNs()) / 1'000'000;
    if (left_ms <= 0) break;
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left_ms));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    char buf[512];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  if (auto nl = line.find('\n'); nl != std::string::npos) line.resize(nl);
  if (line.find_first_not_of(" \t\r") == std::string::npos) return false;  // a probe
  Reply reply = d.control->Handle(line);
  size_t sent = 0;
  while (sent < reply.text.size()) {
    ssize_t n = send(fd, reply.text.data() + sent, reply.text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  return reply.quit;
}

void TearDown(Daemon& d) {
  if (d.control) d.control->Shutdown();
  for (const std::string& link : d.route_links) unlink(link.c_str());
  if (d.listen_fd >= 0) {
    close(d.listen_fd);
    unlink(d.socket_path.c_str());
  }
  if (d.pid_fd >= 0) {
    unlink(d.pid_path.c_str());
    close(d.pid_fd);
  }
  if (d.log) d.log->Write("Control", "Control daemon exiting");
}

int RunDaemon(Daemon& d) {
  struct sigaction sa {};
  sa.sa_handler = OnStop;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  bool quit = false;
  while (!quit && g_stop == 0) {
    pollfd p{d.listen_fd, POLLIN, 0};
    int r = poll(&p, 1, 500);
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (r <= 0) continue;
    int fd = accept4(d.listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    quit = Serve(d, fd);
    close(fd);
  }
  TearDown(d);
  return 0;
}

int Daemonize(const StartOptions& start) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) {
    perror("nvidia-cuda-mps-control: pipe");
    return 1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("nvidia-cuda-mps-control: fork");
    return 1;
  }
  if (pid > 0) {  // the foreground invocation: wait for the verdict
    close(ready[1]);
    std::string verdict;
    char buf[512];
    ssize_t n;
    while ((n = read(ready[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) verdict.append(buf, static_cast<size_t>(n));
    }
    waitpid(pid, nullptr, WNOHANG);
    if (verdict == "ok") return 0;
    fprintf(stderr, "%s\n",
            verdict.empty() ? "MPS control daemon failed to start" : verdict.c_str());
    return 1;
  }
  close(ready[0]);
  setsid();
  Daemon d;
  d.start = start;
  Status s = SetUp(&d);
  std::string verdict = s.ok() ? "ok" : s.message();
  if (write(ready[1], verdict.data(), verdict.size()) < 0) {
    // The parent is gone; carry on (or stop) all the same.
  }
  close(ready[1]);
  if (!s.ok()) {
    TearDown(d);
    _exit(1);
  }
  int null_fd = open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    dup2(null_fd, 0);
    dup2(null_fd, 1);
    dup2(null_fd, 2);
    if (null_fd > 2) close(null_fd);
  }
  _exit(RunDaemon(d));
}

int Foreground(const StartOptions& start) {
  Daemon d;
  d.start = start;
  if (Status s = SetUp(&d); !s.ok()) {
    fprintf(stderr, "%s\n", s.message().c_str());
    TearDown(d);
    return 1;
  }
  return RunDaemon(d);
}

int ClientMode() {
  const std::string dir = PipeDirectory();
  // A probe (an empty request) tells a listening daemon from none.
  if (auto probe = Request(dir, "", 5000); !probe.ok()) {
    fprintf(stderr, "Cannot find MPS control daemon process (pipe directory %s)\n", dir.c_str());
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto reply = Request(dir, line);
    if (!reply.ok()) {
      fprintf(stderr, "Cannot reach MPS control daemon: %s\n", reply.status().message().c_str());
      return 1;
    }
    fwrite(reply->data(), 1, reply->size(), stdout);
    fflush(stdout);
    if (line.find_first_not_of(" \t") != std::string::npos &&
        line.substr(line.find_first_not_of(" \t")).starts_with("quit")) {
      break;
    }
  }
  return 0;
}

// Sends one command line (-q, or an MPS v3 verb given as arguments) and
// prints the reply; 1 when it is an error.
int OneCommand(const std::string& line) {
  const std::string dir = PipeDirectory();
  auto reply = Request(dir, line);
  if (!reply.ok()) {
    fprintf(stderr, "Cannot find MPS control daemon process (pipe directory %s): %s\n", dir.c_str(),
            reply.status().message().c_str());
    return 1;
  }
  fwrite(reply->data(), 1, reply->size(), stdout);
  return reply->starts_with("Error") ? 1 : 0;
}

int Usage() {
  fprintf(stderr,
          "usage: nvidia-cuda-mps-control [-d | -f] [-p 2|3] [-a FILE] | -q | VERB...\n"
          "  -d  start the MPS control daemon in the background\n"
          "  -f  run it in the foreground\n"
          "  -p, --protocol 2|3  2: legacy MPS (default), 3: MPS v3\n"
          "  -a, --apply FILE    MPS v3 configuration (TOML); needs protocol 3\n"
          "  -q, --quit          stop the daemon\n"
          "  (no option: read commands from stdin and send them to the daemon)\n");
  return 2;
}

// Whether this node's simulated driver ships MPS v3 (r615, CUDA 13.4, and
// later; the node's driver from GPUSLICE_SIM_CONFIG as the driver reads it).
bool NodeHasMpsV3() {
  const char* value = getenv("GPUSLICE_SIM_CONFIG");
  auto text = LoadSimConfigText(value == nullptr ? "" : value);
  if (!text.ok()) return false;
  auto config = text->empty() ? StatusOr<SimConfig>(DefaultSimConfig()) : ParseSimConfig(*text);
  return config.ok() && DriverMajorVersion(config->params.driver_version) >= 615;
}

// -h: with protocol 3 the MPS v3 modules are listed (how a caller tells a
// control binary that speaks v3: `nvidia-cuda-mps-control -p 3 -h` lists
// server and namespace).
int Help(int protocol) {
  Usage();
  if (protocol == 3) {
    printf(
        "MPS v3 modules (nvidia-cuda-mps-control MODULE VERB [options]):\n"
        "  server        list\n"
        "  namespace     list --server=NAME\n"
        "  sm_partition  list --server=NAME\n"
        "  client        list --all\n");
  } else {
    printf("Commands (one per line on stdin): get_server_list, start_server -uid UID, ...\n");
  }
  return 0;
}

}  // namespace
}  // namespace gpuslice::sim::mps

int main(int argc, char** argv) {
  using namespace gpuslice::sim::mps;  // NOLINT(google-build-using-namespace)
  // Anything thrown (only std::bad_alloc can be) ends the process with a message.
  try {
    if (argc == 1) return ClientMode();
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args[0] == "-q" || args[0] == "--quit")
      return args.size() == 1 ? OneCommand("quit") : Usage();
    if (!args[0].starts_with("-")) {
      std::string line;
      for (const std::string& a : args) line += (line.empty() ? "" : " ") + a;
      return OneCommand(line);
    }
    StartOptions start;
    int mode = 0;  // 'd' or 'f'
    bool help = false;
    std::string protocol_flag;
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&](const std::string& long_name, std::string* out) {
        if (a.starts_with(long_name + "=")) {
          *out = a.substr(long_name.size() + 1);
          return true;
        }
        if (i + 1 >= args.size()) return false;
        *out = args[++i];
        return true;
      };
      if ((a == "-d" || a == "--daemon") && mode == 0) {
        mode = 'd';
      } else if ((a == "-f" || a == "--foreground") && mode == 0) {
        mode = 'f';
      } else if (a == "-h" || a == "--help") {
        help = true;
      } else if (a == "-p" || a == "--protocol" || a.starts_with("--protocol=")) {
        if (!value("--protocol", &protocol_flag)) return Usage();
      } else if (a == "-a" || a == "--apply" || a.starts_with("--apply=")) {
        if (!value("--apply", &start.config_path) || start.config_path.empty()) return Usage();
      } else {
        return Usage();
      }
    }
    // The environment variable wins over the flag (MPS v3 Interface).
    std::string protocol = protocol_flag;
    if (const char* e = getenv("CUDA_MPS_PROTOCOL_VERSION"); e != nullptr && *e != '\0') {
      protocol = e;
    }
    if (!protocol.empty() && protocol != "2" && protocol != "3") {
      fprintf(stderr, "nvidia-cuda-mps-control: protocol '%s' is not 2 or 3\n", protocol.c_str());
      return 2;
    }
    start.protocol = protocol == "3" ? 3 : 2;
    // A control binary older than r615 has no protocol 3 (its -h lists none
    // of v3's modules).
    if (start.protocol == 3 && !NodeHasMpsV3()) {
      if (help) return Help(2);
      fprintf(stderr, "nvidia-cuda-mps-control: unrecognized option: protocol 3\n");
      return 2;
    }
    if (help) return Help(start.protocol);
    if (mode == 0) return Usage();
    if (!start.config_path.empty() && start.protocol != 3) {
      fprintf(stderr, "nvidia-cuda-mps-control: -a needs MPS v3 (-p 3)\n");
      return 2;
    }
    return mode == 'd' ? Daemonize(start) : Foreground(start);
  } catch (const std::exception& e) {
    fprintf(stderr, "nvidia-cuda-mps-control: %s\n", e.what());
    return 1;
  }
}
