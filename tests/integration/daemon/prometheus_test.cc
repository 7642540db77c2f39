// The daemon's metrics as Prometheus sees them: `promtool check metrics` (the
// linter of Debian's prometheus package) accepts GET /metrics, and a real
// Prometheus server on loopback scrapes the daemon over TCP and answers
// queries for its series, the GPU ones and those of a registered group.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/unix_http_client.h"
#include "tests/integration/support/daemon_ready.h"
#include "tests/integration/support/free_port.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using nlohmann::json;
using testing::BuildDir;
using testing::FreePort;
using testing::WaitFor;
using namespace std::chrono_literals;

// GET http://127.0.0.1:`port``target`; the body, or "" when nothing answers.
std::string HttpGet(int port, const std::string& target) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request =
        "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[8192];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) response.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

class PrometheusTest : public testing::SimProcessTest {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    socket_ = dir_ + "/gpusliced.sock";
  }

  void StartDaemon(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--socket",  socket_,       "--poll-interval-ms",
                                     "100",       "--state-dir", dir_ + "/state",
                                     "--shm-dir", shm_dir_};
    args.insert(args.end(), extra.begin(), extra.end());
    StartProgram("gpusliced", 0, args, {R"(GPUSLICE_SIM_CONFIG={"device_count":2})"});
    ASSERT_TRUE(testing::WaitForDaemonReady(socket_)) << Read("err0");
  }

  // A group with limits and this test process as its one tenant.
  void RegisterGroup() {
    cli::UnixHttpClient client(socket_, 5s);
    auto put = client.Request("PUT", "/v1/groups/prom-g",
                              R"({"limits": {"all": {"memory": "2GiB", "compute_percent": 40}}})");
    ASSERT_TRUE(put.ok() && put->status == 200) << (put.ok() ? put->body : put.status().ToString());
    auto reg = client.Request("POST", "/v1/tenants", R"({"group": "prom-g", "devices": [0]})");
    ASSERT_TRUE(reg.ok() && reg->status == 201) << (reg.ok() ? reg->body : reg.status().ToString());
  }

  std::string Metrics() {
    auto r = cli::UnixHttpClient(socket_, 5s).Request("GET", "/metrics");
    EXPECT_TRUE(r.ok() && r->status == 200);
    return r.ok() ? r->body : "";
  }

  std::string socket_;
};

TEST_F(PrometheusTest, PromtoolAcceptsTheDaemonsMetrics) {
  ASSERT_EQ(access("/usr/bin/promtool", X_OK), 0) << "promtool is missing: run scripts/setup";
  StartDaemon();
  RegisterGroup();
  const std::string registered = Metrics();
  EXPECT_NE(registered.find("gpuslice_group_tenants{group=\"prom-g\",pod=\"\",namespace=\"\"} 1\n"),
            std::string::npos)
      << registered;
  EXPECT_NE(registered.find("gpuslice_tenant_memory_used_bytes{group=\"prom-g\""),
            std::string::npos);
  // A limited process of the group: the daemon controls its segment, whose
  // counters are series too.
  StartProgram("gpuslice-alloc-probe", 1,
               {"alloc", "--chunk", std::to_string(64 << 20), "--max", "1", "--hold-s", "60"},
               {"LD_PRELOAD=" + BuildDir() + "/lib/libgpuslice.so", "GPUSLICE_SHM_DIR=" + shm_dir_,
                "GPUSLICE_GROUP=prom-g"});
  std::string metrics = Metrics();
  ASSERT_TRUE(WaitFor(
      [&] {
        metrics = Metrics();
        return metrics.find("gpuslice_group_controlled_by_daemon{group=\"prom-g\"} 1\n") !=
               std::string::npos;
      },
      20s))
      << metrics << Read("err1");
  EXPECT_NE(metrics.find("gpuslice_group_alloc_refusals_total{group=\"prom-g\",gpu=\"0\""),
            std::string::npos)
      << metrics;
  const std::string file = dir_ + "/metrics.txt";
  std::ofstream(file) << metrics;
  const std::string out = dir_ + "/promtool.out";
  const int rc = system(("promtool check metrics < " + file + " > " + out + " 2>&1").c_str());
  std::ifstream in(out);
  const std::string report((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << report;
  EXPECT_EQ(report, "") << "promtool found problems";
}

TEST_F(PrometheusTest, ARealPrometheusServerScrapesTheDaemon) {
  ASSERT_EQ(access("/usr/bin/prometheus", X_OK), 0) << "prometheus is missing: run scripts/setup";
  const int daemon_port = FreePort();
  std::ofstream(dir_ + "/tokens") << "secret-token\n";
  StartDaemon({"--listen-tcp", "127.0.0.1:" + std::to_string(daemon_port), "--token-file",
               dir_ + "/tokens"});
  const int prom_port = FreePort();
  std::ofstream(dir_ + "/prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
      << "scrape_configs:\n  - job_name: gpusliced\n    static_configs:\n"
      << "      - targets: ['127.0.0.1:" << daemon_port << "']\n";
  StartProgram(
      "/usr/bin/prometheus", 1,
      {"--config.file=" + dir_ + "/prometheus.yml", "--storage.tsdb.path=" + dir_ + "/tsdb",
       "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)});
  auto query = [&](const std::string& expr) {
    return json::parse(HttpGet(prom_port, "/api/v1/query?query=" + expr), nullptr, false);
  };
  // The target is up and the GPU series arrived, with the daemon's labels.
  json result;
  const bool scraped = WaitFor(
      [&] {
        result = query("gpuslice_gpu_power_limit_watts");
        return result.is_object() && result.value("status", "") == "success" &&
               result["data"]["result"].size() == 2;
      },
      60s);
  ASSERT_TRUE(scraped) << "prometheus answered: " << result.dump() << "\nits log:\n"
                       << Read("err1");
  EXPECT_EQ(result["data"]["result"][0]["metric"]["job"], "gpusliced");
  EXPECT_EQ(result["data"]["result"][0]["value"][1], "700");
  const json up = query("up");
  ASSERT_EQ(up["data"]["result"].size(), 1u) << up.dump();
  EXPECT_EQ(up["data"]["result"][0]["value"][1], "1");

  // The group's series: its limit on each GPU, its tenant count.
  RegisterGroup();
  const bool group_scraped = WaitFor(
      [&] {
        result = query("gpuslice_group_memory_limit_bytes%7Bgroup%3D%22prom-g%22%7D");
        return result.is_object() && result.value("status", "") == "success" &&
               result["data"]["result"].size() == 2;
      },
      60s);
  ASSERT_TRUE(group_scraped) << "prometheus answered: " << result.dump();
  EXPECT_EQ(result["data"]["result"][0]["value"][1], "2147483648");
  EXPECT_EQ(result["data"]["result"][0]["metric"]["namespace"], nullptr);  // "" is no label
  const json tenants = query("gpuslice_group_tenants%7Bgroup%3D%22prom-g%22%7D");
  ASSERT_EQ(tenants["data"]["result"].size(), 1u) << tenants.dump();
  EXPECT_EQ(tenants["data"]["result"][0]["value"][1], "1");
  const json compute =
      query("gpuslice_group_compute_limit_ratio%7Bgroup%3D%22prom-g%22%2Cgpu%3D%221%22%7D");
  ASSERT_EQ(compute["data"]["result"].size(), 1u) << compute.dump();
  EXPECT_EQ(compute["data"]["result"][0]["value"][1], "0.4");
}

}  // namespace
}  // namespace gpuslice
