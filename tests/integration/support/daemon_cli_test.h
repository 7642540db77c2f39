// DaemonCliTest: the real gpusliced on a private simulated node, driven
// through the real `gpuslice` binary (the CLI tests of the registry and the
// scheduler). The daemon listens on a socket any uid can reach, so a test
// can run the CLI as uid 65534 (setpriv) to check the admin-only rules.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <csignal>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/unix_http_client.h"
#include "tests/integration/support/daemon_ready.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice::testing {

class DaemonCliTest : public SimProcessTest {
 protected:
  using json = nlohmann::json;

  void SetUp() override {
    SimProcessTest::SetUp();
    chmod(dir_.c_str(), 0711);  // uid 65534 must reach the socket inside
    socket_ = dir_ + "/gpusliced.sock";
  }

  // Starts gpusliced on two simulated GPUs with its state in the test's
  // directory, and waits until it is ready (/readyz).
  void StartDaemon() {
    using namespace std::chrono_literals;
    daemon_ = StartProgram("gpusliced", next_++,
                           {"--socket", socket_, "--socket-mode", "0666", "--poll-interval-ms",
                            "100", "--state-dir", dir_ + "/state", "--shm-dir", shm_dir_},
                           {R"(GPUSLICE_SIM_CONFIG={"device_count":2})"});
    ASSERT_TRUE(testing::WaitForDaemonReady(socket_));
  }

  // SIGTERM, and waits for it to exit.
  void StopDaemon() {
    ASSERT_GT(daemon_, 0);
    ASSERT_EQ(kill(daemon_, SIGTERM), 0);
    EXPECT_EQ(Join(daemon_), 0);
    daemon_ = -1;
  }

  // GET `target` from the daemon, parsed (null if it did not answer).
  json Get(const std::string& target) {
    using namespace std::chrono_literals;
    auto r = cli::UnixHttpClient(socket_, 10s).Request("GET", target);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? json::parse(r->body, nullptr, false) : json();
  }

  struct Result {
    int code;
    std::string out, err;
  };
  // Runs gpuslice with the daemon's socket and this test's segments; as
  // uid 65534 through setpriv when `nobody`.
  Result RunCli(const std::vector<std::string>& args, bool nobody = false) {
    const int n = next_++;
    std::vector<std::string> argv;
    if (nobody) argv = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
    argv.push_back(BuildDir() + "/bin/gpuslice");
    argv.insert(argv.end(), args.begin(), args.end());
    const int code =
        Join(Spawn(n, argv, {"GPUSLICE_SOCKET=" + socket_, "GPUSLICE_SHM_DIR=" + shm_dir_}));
    return {code, Read("out" + std::to_string(n)), Read("err" + std::to_string(n))};
  }

  std::string socket_;
  pid_t daemon_ = -1;
  int next_ = 0;  // numbers the output files of the processes started
};

}  // namespace gpuslice::testing
