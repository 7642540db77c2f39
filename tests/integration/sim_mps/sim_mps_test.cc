// MPS on the simulated GPU with real processes: the control daemon and its
// client mode, the server, and CUDA programs as MPS clients.
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <string>
#include <vector>

#include "common/process.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice::testing {
namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

class SimMpsTest : public SimProcessTest {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    pipe_ = dir_ + "/pipe";
    logs_ = dir_ + "/log";
  }
  void TearDown() override {
    // Whatever a test left running: ask the daemon to quit, then make sure.
    const pid_t daemon = DaemonPid();
    if (daemon > 0) {
      Control({"quit"});
      if (!WaitFor([&] { return !ProcessAlive(daemon, 0); }, std::chrono::seconds(10))) {
        kill(daemon, SIGKILL);
      }
    }
    SimProcessTest::TearDown();
  }

  std::string SimBin(const std::string& name) { return BuildDir() + "/sim/bin/" + name; }

  // The environment of every process of the test: the simulated GPU and this
  // test's MPS directories, plus (or overridden by) `extra` (NAME=VALUE).
  std::vector<std::string> Env(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> env = {"LD_LIBRARY_PATH=" + BuildDir() + "/sim/lib",
                                    "GPUSLICE_SIM_STATE=" + state_,
                                    "CUDA_MPS_PIPE_DIRECTORY=" + pipe_,
                                    "CUDA_MPS_LOG_DIRECTORY=" + logs_, "PATH=/usr/bin:/bin"};
    for (const std::string& e : extra) {  // an extra entry replaces one of the same name
      const std::string name = e.substr(0, e.find('=') + 1);
      std::erase_if(env, [&](const std::string& x) { return x.starts_with(name); });
      env.push_back(e);
    }
    return env;
  }

  struct Result {
    int rc;
    std::string out, err;
  };

  // Runs nvidia-cuda-mps-control in client mode with `lines` on its stdin.
  Result Control(const std::vector<std::string>& lines) {
    const int n = next_++;
    const std::string in = dir_ + "/in" + std::to_string(n);
    {
      std::ofstream f(in);
      for (const auto& l : lines) f << l << "\n";
    }
    pid_t pid = Spawn(
        n, {"/bin/sh", "-c", "exec '" + SimBin("nvidia-cuda-mps-control") + "' < '" + in + "'"},
        Env());
    const int rc = Join(pid);
    return {rc, Read("out" + std::to_string(n)), Read("err" + std::to_string(n))};
  }
  std::string Ask(const std::string& line) { return Control({line}).out; }

  Result StartDaemon() {
    const int n = next_++;
    pid_t pid = Spawn(n, {SimBin("nvidia-cuda-mps-control"), "-d"}, Env());
    const int rc = Join(pid);
    return {rc, Read("out" + std::to_string(n)), Read("err" + std::to_string(n))};
  }

  pid_t DaemonPid() {
    std::ifstream f(pipe_ + "/nvidia-cuda-mps-control.pid");
    pid_t pid = 0;
    f >> pid;
    return pid;
  }

  // Starts gpuslice-mps-probe; its output goes to "out<n>".
  pid_t Probe(int n, const std::vector<std::string>& args,
              const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> argv = {BuildDir() + "/bin/gpuslice-mps-probe"};
    argv.insert(argv.end(), args.begin(), args.end());
    return Spawn(n, argv, Env(extra_env));
  }

  // The JSON line of stage `stage` in "out<n>", waiting for it.
  json Stage(int n, const std::string& stage) {
    json found;
    WaitFor(
        [&] {
          std::istringstream in(Read("out" + std::to_string(n)));
          std::string line;
          while (std::getline(in, line)) {
            auto j = json::parse(line, nullptr, false);
            if (!j.is_discarded() && j.value("stage", "") == stage) {
              found = j;
              return true;
            }
          }
          return false;
        },
        kTimeout);
    return found;
  }

  void Touch(const std::string& path) { std::ofstream(path) << "go\n"; }

  std::string pipe_, logs_;
  int next_ = 100;  // output file numbers of control invocations
};

TEST_F(SimMpsTest, StartsWithDashDAndQuits) {
  Result r = StartDaemon();
  ASSERT_EQ(r.rc, 0) << r.err;
  const pid_t daemon = DaemonPid();
  ASSERT_GT(daemon, 0);
  EXPECT_TRUE(ProcessAlive(daemon, 0));
  EXPECT_NE(Read("log/control.log").find("Control"), std::string::npos);
  EXPECT_NE(Read("log/control.log").find("Starting control daemon"), std::string::npos);

  Result second = StartDaemon();
  EXPECT_EQ(second.rc, 1);
  EXPECT_NE(second.err.find("already running"), std::string::npos) << second.err;
  EXPECT_EQ(DaemonPid(), daemon);

  Result quit = Control({"quit"});
  EXPECT_EQ(quit.rc, 0) << quit.err;
  EXPECT_TRUE(
      WaitFor([&] { return access((pipe_ + "/nvidia-cuda-mps-control.pid").c_str(), F_OK) != 0; },
              kTimeout));
  EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(daemon, 0); }, kTimeout));
}

TEST_F(SimMpsTest, ClientModeWithoutDaemonFailsClearly) {
  Result r = Control({"get_server_list"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("Cannot find MPS control daemon"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(SimMpsTest, CommandReplies) {
  ASSERT_EQ(StartDaemon().rc, 0);
  EXPECT_EQ(Ask("get_server_list"), "");
  EXPECT_EQ(Ask("get_default_active_thread_percentage"), "100.0\n");
  EXPECT_EQ(Ask("set_default_active_thread_percentage 50"), "");
  EXPECT_EQ(Ask("get_default_active_thread_percentage"), "50.0\n");
  EXPECT_EQ(Ask("set_default_device_pinned_mem_limit 0 2G"), "");
  EXPECT_EQ(Ask("get_default_device_pinned_mem_limit 0"), "2G\n");
  EXPECT_EQ(Ask("set_default_client_priority 1"), "");
  EXPECT_EQ(Ask("get_default_client_priority"), "1\n");
  EXPECT_EQ(Ask("start_server -uid " + std::to_string(getuid())), "");
  const std::string servers = Ask("get_server_list");
  ASSERT_FALSE(servers.empty());
  const std::string server = servers.substr(0, servers.find('\n'));
  EXPECT_EQ(servers, server + "\n");
  EXPECT_EQ(Ask("get_server_status " + server), "ACTIVE\n");
  EXPECT_EQ(Ask("get_active_thread_percentage " + server), "50.0\n");
  EXPECT_EQ(Ask("set_active_thread_percentage " + server + " 25"), "");
  EXPECT_EQ(Ask("get_active_thread_percentage " + server), "25.0\n");
  EXPECT_EQ(Ask("get_device_pinned_mem_limit " + server + " 0"), "2G\n");
  EXPECT_EQ(Ask("set_device_pinned_mem_limit " + server + " 0 900M"), "");
  EXPECT_EQ(Ask("get_device_pinned_mem_limit " + server + " 0"), "900M\n");
  EXPECT_EQ(Ask("get_client_list " + server), "");
  EXPECT_EQ(Ask("get_device_client_list"), "");
  EXPECT_TRUE(Ask("ps").starts_with("PID     ID    SERVER  DEVICE"));
  // Bad input: an error line, nothing changed.
  EXPECT_TRUE(Ask("frobnicate").starts_with("Error: unrecognized command"));
  EXPECT_TRUE(Ask("set_default_active_thread_percentage 200").starts_with("Error: "));
  EXPECT_EQ(Ask("get_default_active_thread_percentage"), "50.0\n");
  EXPECT_TRUE(Ask("get_server_status 1").starts_with("Error: no MPS server"));
  // Several commands on one stdin, one reply each.
  Result multi = Control({"get_default_client_priority", "get_server_status " + server});
  EXPECT_EQ(multi.out, "1\nACTIVE\n");
  // The server logs as NVIDIA's does; it is stopped by quit.
  EXPECT_NE(Read("log/server.log").find("Server has started"), std::string::npos);
  const pid_t server_pid = std::stoi(server);
  EXPECT_EQ(Control({"quit"}).rc, 0);
  EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(server_pid, 0); }, kTimeout));
}

TEST_F(SimMpsTest, WithoutDaemonContextsArePlain) {
  Probe(1, {});
  json ready = Stage(1, "ready");
  EXPECT_EQ(ready.value("sms", 0), 132);
  EXPECT_EQ(ready.value("mps", -1), 0);
}

// Two clients at 30% and 60% of the SMs: the MP count reflects each one's
// share, kernel durations follow the waves over those SMs, and the two run
// concurrently (their busy times overlap).
TEST_F(SimMpsTest, ThreadPercentagesShareSmsConcurrently) {
  ASSERT_EQ(StartDaemon().rc, 0);
  const std::string go = dir_ + "/go";
  // 10560 blocks of 256 threads: 8 blocks per SM; 39 SMs -> 34 waves,
  // 79 SMs -> 17 waves, of 10 us each plus 3 us launch.
  pid_t a = Probe(1, {"--blocks", "10560", "--kernels", "800", "--hold-file", go},
                  {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30"});
  pid_t b = Probe(2, {"--blocks", "10560", "--kernels", "1600", "--hold-file", go},
                  {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=60"});
  json ra = Stage(1, "ready");
  json rb = Stage(2, "ready");
  EXPECT_EQ(ra.value("sms", 0), 39);
  EXPECT_EQ(rb.value("sms", 0), 79);
  EXPECT_EQ(ra.value("mps", 0), 1);

  const std::string servers = Ask("get_server_list");
  ASSERT_FALSE(servers.empty());
  const std::string server = servers.substr(0, servers.find('\n'));
  const std::string clients = Ask("get_client_list " + server);
  EXPECT_NE(clients.find(std::to_string(a) + "\n"), std::string::npos) << clients;
  EXPECT_NE(clients.find(std::to_string(b) + "\n"), std::string::npos) << clients;
  const std::string devices = Ask("get_device_client_list " + server);
  EXPECT_TRUE(devices.starts_with("GPU-")) << devices;
  EXPECT_NE(devices.find("  " + std::to_string(a) + "\n"), std::string::npos) << devices;
  const std::string ps = Ask("ps -p " + std::to_string(b));
  EXPECT_NE(ps.find(std::to_string(b) + " "), std::string::npos) << ps;
  EXPECT_NE(ps.find("gpuslice-mps-pr"), std::string::npos) << ps;

  const json before = Stats();
  Touch(go);
  json da = Stage(1, "done");
  json db = Stage(2, "done");
  EXPECT_EQ(Join(a), 0);
  EXPECT_EQ(Join(b), 0);
  EXPECT_NEAR(da.value("kernel_ms", 0.0), 0.343, 0.343 * 0.02);
  EXPECT_NEAR(db.value("kernel_ms", 0.0), 0.173, 0.173 * 0.02);

  const json after = Stats();
  auto busy = [&](pid_t pid) {
    return Process(after, pid)["devices"][0].value("busy_ns", int64_t{0});
  };
  const int64_t device_busy = after["devices"][0].value("busy_ns", int64_t{0}) -
                              before["devices"][0].value("busy_ns", int64_t{0});
  // Each ran about 0.27 s of kernels; together they overlapped, so the device
  // was busy for well under the sum.
  EXPECT_NEAR(static_cast<double>(busy(a)), 800 * 343e3, 800 * 343e3 * 0.02);
  EXPECT_NEAR(static_cast<double>(busy(b)), 1600 * 173e3, 1600 * 173e3 * 0.02);
  EXPECT_LT(static_cast<double>(device_busy), 0.8 * static_cast<double>(busy(a) + busy(b)));
}

TEST_F(SimMpsTest, PinnedMemoryLimitIsEnforced) {
  ASSERT_EQ(StartDaemon().rc, 0);
  const std::string gib = std::to_string(1ull << 30);
  Probe(1, {"--alloc", std::to_string(2ull << 30)}, {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G"});
  Probe(2, {"--alloc", std::to_string(512ull << 20)}, {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G"});
  EXPECT_EQ(Stage(1, "ready").value("alloc", ""), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(Stage(2, "ready").value("alloc", ""), "CUDA_SUCCESS");
  // The server's limit applies to clients that set none.
  const std::string servers = Ask("get_server_list");
  const std::string server = servers.substr(0, servers.find('\n'));
  EXPECT_EQ(Ask("set_device_pinned_mem_limit " + server + " 0 1G"), "");
  Probe(3, {"--alloc", std::to_string(2ull << 30)});
  EXPECT_EQ(Stage(3, "ready").value("alloc", ""), "CUDA_ERROR_OUT_OF_MEMORY");
}

TEST_F(SimMpsTest, TerminateClientFailsItsCallsAndFreesItsMemory) {
  ASSERT_EQ(StartDaemon().rc, 0);
  const std::string hold = dir_ + "/hold";
  pid_t p = Probe(1, {"--alloc", std::to_string(1ull << 30), "--hold-file", hold});
  ASSERT_EQ(Stage(1, "ready").value("alloc", ""), "CUDA_SUCCESS");
  EXPECT_GT(Process(Stats(), p)["devices"][0].value("memory_bytes", uint64_t{0}), 1ull << 30);
  const std::string servers = Ask("get_server_list");
  const std::string server = servers.substr(0, servers.find('\n'));
  EXPECT_EQ(Ask("terminate_client " + server + " " + std::to_string(p)), "");
  EXPECT_EQ(Process(Stats(), p)["devices"][0].value("memory_bytes", uint64_t{1}), 0u);
  EXPECT_EQ(Ask("get_client_list " + server), "");
  Touch(hold);
  json after = Stage(1, "after");
  EXPECT_EQ(after.value("sync", ""), "CUDA_ERROR_MPS_CLIENT_TERMINATED") << after;
  EXPECT_EQ(after.value("alloc", ""), "CUDA_ERROR_MPS_CLIENT_TERMINATED") << after;
  EXPECT_EQ(Join(p), 0);
}

TEST_F(SimMpsTest, NvmlAttributesClientsToTheServer) {
  ASSERT_EQ(StartDaemon().rc, 0);
  const std::string hold = dir_ + "/hold";
  pid_t p = Probe(1, {"--alloc", std::to_string(1ull << 30), "--hold-file", hold});
  ASSERT_EQ(Stage(1, "ready").value("alloc", ""), "CUDA_SUCCESS");
  const std::string servers = Ask("get_server_list");
  const std::string server = servers.substr(0, servers.find('\n'));
  const int n = next_++;
  pid_t smi = Spawn(
      n, {SimBin("nvidia-smi"), "--query-compute-apps=pid,used_memory", "--format=csv,noheader"},
      Env());
  ASSERT_EQ(Join(smi), 0) << Read("err" + std::to_string(n));
  const std::string apps = Read("out" + std::to_string(n));
  EXPECT_NE(apps.find(server + ","), std::string::npos) << apps;
  EXPECT_EQ(apps.find(std::to_string(p) + ","), std::string::npos) << apps;
  // Ground truth still knows the client's own memory.
  EXPECT_GT(Process(Stats(), p)["devices"][0].value("memory_bytes", uint64_t{0}), 1ull << 30);
  Touch(hold);
  EXPECT_EQ(Join(p), 0);
}

TEST_F(SimMpsTest, ExclusiveProcessAdmitsTheServerAndItsClientsOnly) {
  {
    auto gpu = sim::SimGpu::Open({state_, "", /*observer=*/true});
    ASSERT_TRUE(gpu.ok()) << gpu.status().message();
    (*gpu)->WithState(
        [](sim::SimState& s) { s.devices[0].compute_mode = sim::kComputeExclusiveProcess; });
  }
  ASSERT_EQ(StartDaemon().rc, 0);
  const std::string hold = dir_ + "/hold";
  pid_t a = Probe(1, {"--hold-file", hold});
  pid_t b = Probe(2, {"--hold-file", hold});
  EXPECT_EQ(Stage(1, "ready").value("mps", 0), 1);
  EXPECT_EQ(Stage(2, "ready").value("mps", 0), 1);
  // A process that is no MPS client (its pipe directory has no daemon).
  pid_t plain = Spawn(3, {BuildDir() + "/bin/gpuslice-workload", "--kernels", "1"},
                      Env({"CUDA_MPS_PIPE_DIRECTORY=" + dir_ + "/nowhere"}));
  EXPECT_EQ(Join(plain), 3);
  EXPECT_NE(Read("err3").find("CUDA_ERROR_DEVICE_UNAVAILABLE"), std::string::npos) << Read("err3");
  Touch(hold);
  EXPECT_EQ(Join(a), 0);
  EXPECT_EQ(Join(b), 0);
}

TEST_F(SimMpsTest, DeadDaemonMeansPlainContexts) {
  ASSERT_EQ(StartDaemon().rc, 0);
  const pid_t daemon = DaemonPid();
  ASSERT_GT(daemon, 0);
  kill(daemon, SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return !ProcessAlive(daemon, 0); }, kTimeout));
  Probe(1, {});
  json ready = Stage(1, "ready");
  EXPECT_EQ(ready.value("mps", -1), 0);
  EXPECT_EQ(ready.value("sms", 0), 132);
}

}  // namespace
// MPS v3 (docs/sim-mps.md "MPS v3"): a daemon started with -p 3 and a TOML
// configuration routes clients to a server's namespaces by the socket they
// use, and each namespace caps its clients.
TEST_F(SimMpsTest, V3NamespacesCapTheirClients) {
  const std::string r615 = R"(GPUSLICE_SIM_CONFIG={"driver_version":"615.10"})";
  const std::string config = dir_ + "/mps.toml";
  std::ofstream(config) << "schema_version = \"1.0\"\n"
                           "[servers.train]\nactive_thread_percentage = \"50\"\n"
                           "[servers.train.namespaces.small]\n"
                           "active_thread_percentage = \"25\"\npinned_memory_limit = \"1G\"\n";
  // An older driver's control binary has no protocol 3.
  pid_t old =
      Spawn(next_++, {SimBin("nvidia-cuda-mps-control"), "-d", "-p", "3", "-a", config}, Env());
  EXPECT_NE(Join(old), 0);
  const int n = next_++;
  pid_t d = Spawn(n, {SimBin("nvidia-cuda-mps-control"), "-d", "-a", config},
                  Env({r615, "CUDA_MPS_PROTOCOL_VERSION=3"}));
  ASSERT_EQ(Join(d), 0) << Read("err" + std::to_string(n));

  // The server's own (default) namespace, and the capped one: a client's own
  // variables cannot lift the namespace's limits.
  const std::string go = dir_ + "/go";  // they stay clients until then
  const pid_t p1 = Probe(1, {"--alloc", std::to_string(512ull << 20), "--hold-file", go},
                         {r615, "CUDA_MPS_PIPE_DIRECTORY=" + pipe_ + "/train"});
  const pid_t p2 = Probe(2, {"--alloc", std::to_string(512ull << 20), "--hold-file", go},
                         {r615, "CUDA_MPS_PIPE_DIRECTORY=" + pipe_ + "/train/small",
                          "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=90"});
  Probe(3, {"--alloc", std::to_string(2ull << 30)},
        {r615, "CUDA_MPS_PIPE_DIRECTORY=" + pipe_ + "/train/small"});
  const json one = Stage(1, "ready");
  const json two = Stage(2, "ready");
  EXPECT_EQ(one.value("mps", 0), 1) << one.dump();
  EXPECT_EQ(one.value("sms", 0), 66) << "50 % of 132 SMs";
  EXPECT_EQ(one.value("alloc", ""), "CUDA_SUCCESS");
  EXPECT_EQ(two.value("sms", 0), 33) << "the namespace's 25 %, not the client's 90 %";
  EXPECT_EQ(two.value("alloc", ""), "CUDA_SUCCESS");
  EXPECT_EQ(Stage(3, "ready").value("alloc", ""), "CUDA_ERROR_OUT_OF_MEMORY")
      << "the namespace's 1G";

  const int m = next_++;
  pid_t list =
      Spawn(m, {SimBin("nvidia-cuda-mps-control"), "client", "list", "--all"}, Env({r615}));
  EXPECT_EQ(Join(list), 0);
  const std::string clients = Read("out" + std::to_string(m));
  EXPECT_NE(clients.find(" train default "), std::string::npos) << clients;
  EXPECT_NE(clients.find(" train small "), std::string::npos) << clients;
  Touch(go);
  EXPECT_EQ(Join(p1), 0);
  EXPECT_EQ(Join(p2), 0);
  const int q = next_++;
  EXPECT_EQ(Join(Spawn(q, {SimBin("nvidia-cuda-mps-control"), "-q"}, Env({r615}))), 0);
}

// The configuration file's schema is strict (MPS v3 Configuration File: any
// other key is a configuration error): a daemon given a file with an unknown
// key, at the top, in a server or in a namespace, does not start, says which
// key and leaves no pid file; the same file without it starts (by -p 3).
TEST_F(SimMpsTest, AV3ConfigurationWithAnUnknownKeyDoesNotStart) {
  const std::string r615 = R"(GPUSLICE_SIM_CONFIG={"driver_version":"615.10"})";
  const std::string good =
      "schema_version = \"1.0\"\n"
      "[servers.train]\nactive_thread_percentage = \"50\"\n"
      "[servers.train.namespaces.small]\n"
      "active_thread_percentage = \"25\"\npinned_memory_limit = \"1G\"\n";
  const std::pair<std::string, std::string> cases[] = {
      {"colour = \"red\"\n" + good, "unknown key 'colour'"},
      {good.substr(0, good.find("[servers.train.namespaces")) + "max_clients = \"4\"\n" +
           good.substr(good.find("[servers.train.namespaces")),
       "servers.train: unknown key 'max_clients'"},
      {good + "uid = 4\n", "servers.train.namespaces.small: unknown key 'uid'"},
  };
  for (const auto& [text, want] : cases) {
    const std::string config = dir_ + "/bad.toml";
    std::ofstream(config) << text;
    const int n = next_++;
    const pid_t d =
        Spawn(n, {SimBin("nvidia-cuda-mps-control"), "-d", "-p", "3", "-a", config}, Env({r615}));
    EXPECT_NE(Join(d), 0) << text;
    EXPECT_NE(Read("err" + std::to_string(n)).find(want), std::string::npos)
        << text << "\n-> " << Read("err" + std::to_string(n));
    EXPECT_EQ(DaemonPid(), 0) << "no daemon for\n" << text;
  }
  const std::string config = dir_ + "/good.toml";
  std::ofstream(config) << good;
  const int n = next_++;
  const pid_t d =
      Spawn(n, {SimBin("nvidia-cuda-mps-control"), "-d", "-p", "3", "-a", config}, Env({r615}));
  ASSERT_EQ(Join(d), 0) << Read("err" + std::to_string(n));
  EXPECT_GT(DaemonPid(), 0);
  const pid_t probe = Probe(1, {}, {r615, "CUDA_MPS_PIPE_DIRECTORY=" + pipe_ + "/train/small"});
  const json one = Stage(1, "ready");
  EXPECT_EQ(one.value("mps", 0), 1) << one.dump();
  EXPECT_EQ(one.value("sms", 0), 33) << "the namespace's 25 % of 132 SMs: " << one.dump();
  EXPECT_EQ(Join(probe), 0);
  const int q = next_++;
  EXPECT_EQ(Join(Spawn(q, {SimBin("nvidia-cuda-mps-control"), "-q"}, Env({r615}))), 0);
}

}  // namespace gpuslice::testing
