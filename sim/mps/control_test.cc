#include "sim/mps/control.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "sim/mps/log_file.h"
#include "sim/mps/v3_config.h"

namespace gpuslice::sim::mps {
namespace {

// Records what the daemon does; processes are alive unless marked dead.
class FakeHost : public MpsHost {
 public:
  StatusOr<int32_t> StartServer(uint32_t uid) override {
    if (fail_start) return Unavailable("no GPU");
    started.push_back(uid);
    return next_server_pid++;
  }
  void StopServer(int32_t pid) override { stopped.push_back(pid); }
  bool Alive(int32_t pid) override { return dead.count(pid) == 0; }
  std::string CommandName(int32_t pid) override { return "prog" + std::to_string(pid); }
  uint64_t PidNamespace(int32_t /*pid*/) override { return 4026531836; }
  void TerminateClient(int32_t server, int32_t client) override {
    terminated.emplace_back(server, client);
  }
  void Log(std::string_view message) override { log.emplace_back(message); }

  bool fail_start = false;
  int32_t next_server_pid = 500;
  std::vector<uint32_t> started;
  std::vector<int32_t> stopped;
  std::set<int32_t> dead;
  std::vector<std::pair<int32_t, int32_t>> terminated;
  std::vector<std::string> log;
};

class MpsControlTest : public ::testing::Test {
 protected:
  MpsControlTest()
      : control_(&host_, {0, 1},
                 {"GPU-11111111-2222-3333-4444-555555555555",
                  "GPU-66666666-7777-8888-9999-000000000000"}) {}

  std::string Run(const std::string& line) { return control_.Handle(line).text; }
  std::string Connect(int pid, int device, const std::string& percent = "-",
                      const std::string& bytes = "-") {
    return Run("__client_connect " + std::to_string(pid) + " 1000 " + std::to_string(device) + " " +
               percent + " " + bytes + " 0");
  }

  FakeHost host_;
  MpsControl control_;
};

TEST_F(MpsControlTest, NoServerUntilFirstClient) {
  EXPECT_EQ(Run("get_server_list"), "");
  EXPECT_EQ(Connect(100, 0), "OK 500 100 0 0\n");
  EXPECT_EQ(Run("get_server_list"), "500\n");
  EXPECT_EQ(Run("get_server_status 500"), "ACTIVE\n");
  EXPECT_EQ(Run("get_client_list 500"), "100\n");
  EXPECT_EQ(host_.started, std::vector<uint32_t>{1000});
}

TEST_F(MpsControlTest, StartServerPrintsNothingAndIsIdempotentPerUser) {
  EXPECT_EQ(Run("start_server -uid 1000"), "");
  EXPECT_EQ(Run("start_server -uid 1000"), "");
  EXPECT_EQ(host_.started.size(), 1u);
  EXPECT_TRUE(Run("start_server -uid 2000").starts_with("Error: "));
}

TEST_F(MpsControlTest, ThreadPercentageDefaultsAndOverrides) {
  EXPECT_EQ(Run("get_default_active_thread_percentage"), "100.0\n");
  EXPECT_EQ(Run("set_default_active_thread_percentage 40"), "");
  EXPECT_EQ(Run("get_default_active_thread_percentage"), "40.0\n");
  EXPECT_EQ(Connect(100, 0), "OK 500 40 0 0\n");          // the server took the default
  EXPECT_EQ(Connect(101, 0, "30.0"), "OK 500 30 0 0\n");  // the client's own wins
  EXPECT_EQ(Run("set_active_thread_percentage 500 60"), "");
  EXPECT_EQ(Run("get_active_thread_percentage 500"), "60.0\n");
  EXPECT_EQ(Connect(102, 1), "OK 500 60 0 0\n");
  // An already connected client keeps what it got.
  EXPECT_EQ(Connect(100, 0), "OK 500 40 0 0\n");
}

TEST_F(MpsControlTest, PinnedLimits) {
  EXPECT_EQ(Run("get_default_device_pinned_mem_limit 0"), "0\n");
  EXPECT_EQ(Run("set_default_device_pinned_mem_limit 1 2G"), "");
  EXPECT_EQ(Run("get_default_device_pinned_mem_limit 1"), "2G\n");
  EXPECT_TRUE(Run("set_default_device_pinned_mem_limit 2 2G").starts_with("Error: invalid device"));
  EXPECT_EQ(Connect(100, 1), "OK 500 100 2147483648 0\n");
  EXPECT_EQ(Run("set_device_pinned_mem_limit 500 1 900M"), "");
  EXPECT_EQ(Run("get_device_pinned_mem_limit 500 1"), "900M\n");
  EXPECT_EQ(Connect(101, 1), "OK 500 100 943718400 0\n");
  EXPECT_EQ(Connect(102, 1, "-", "1048576"), "OK 500 100 1048576 0\n");
  EXPECT_TRUE(Run("get_device_pinned_mem_limit 999 1").starts_with("Error: no MPS server"));
}

TEST_F(MpsControlTest, ClientPriority) {
  EXPECT_EQ(Run("get_default_client_priority"), "0\n");
  EXPECT_EQ(Run("set_default_client_priority 1"), "");
  EXPECT_EQ(Run("get_default_client_priority"), "1\n");
  EXPECT_EQ(Connect(100, 0), "OK 500 100 0 1\n");
}

TEST_F(MpsControlTest, DeviceClientListAndPs) {
  Connect(100, 0);
  Connect(101, 1);
  Connect(100, 1);
  EXPECT_EQ(Run("get_client_list 500"), "100\n101\n");
  EXPECT_EQ(Run("get_device_client_list"),
            "GPU-11111111-2222-3333-4444-555555555555\n  100\n"
            "GPU-66666666-7777-8888-9999-000000000000\n  101\n  100\n");
  EXPECT_EQ(Run("get_device_client_list 500"), Run("get_device_client_list"));
  EXPECT_TRUE(Run("get_device_client_list 7").starts_with("Error: "));
  const std::string ps = Run("ps");
  EXPECT_TRUE(ps.starts_with("PID     ID    SERVER  DEVICE            NAMESPACE    COMMAND\n"))
      << ps;
  EXPECT_NE(ps.find("101     1     500     GPU-66666666-7777 4026531836   prog101\n"),
            std::string::npos)
      << ps;
  const std::string one = Run("ps -p 101");
  EXPECT_EQ(std::count(one.begin(), one.end(), '\n'), 2) << one;
}

TEST_F(MpsControlTest, DeadClientsAreForgotten) {
  Connect(100, 0);
  Connect(101, 0);
  host_.dead.insert(100);
  EXPECT_EQ(Run("get_client_list 500"), "101\n");
}

TEST_F(MpsControlTest, DeadServerIsFaultThenReplaced) {
  Connect(100, 0);
  host_.dead.insert(500);
  EXPECT_EQ(Run("get_server_status 500"), "FAULT\n");
  EXPECT_EQ(Connect(101, 0), "OK 501 100 0 0\n");
  EXPECT_EQ(Run("get_server_list"), "501\n");
}

TEST_F(MpsControlTest, TerminateClient) {
  Connect(100, 0);
  EXPECT_EQ(Run("terminate_client 500 100"), "");
  ASSERT_EQ(host_.terminated.size(), 1u);
  EXPECT_EQ(host_.terminated[0], std::make_pair(500, 100));
  EXPECT_EQ(Run("get_client_list 500"), "");
  EXPECT_TRUE(Run("terminate_client 500 100").starts_with("Error: no client"));
  EXPECT_TRUE(Run("terminate_client 9 100").starts_with("Error: no MPS server"));
}

TEST_F(MpsControlTest, MaxClientsPerDevice) {
  for (int i = 0; i < 48; ++i) ASSERT_TRUE(Connect(100 + i, 0).starts_with("OK")) << i;
  EXPECT_TRUE(Connect(200, 0).starts_with("ERROR max_clients"));
  EXPECT_TRUE(Connect(200, 1).starts_with("OK"));
}

TEST_F(MpsControlTest, ConnectErrors) {
  EXPECT_TRUE(Connect(100, 5).starts_with("ERROR bad_device"));
  host_.fail_start = true;
  EXPECT_TRUE(Connect(100, 0).starts_with("ERROR not_ready"));
}

TEST_F(MpsControlTest, BadCommandChangesNothing) {
  EXPECT_EQ(Run("set_default_active_thread_percentage 150").substr(0, 7), "Error: ");
  EXPECT_EQ(Run("get_default_active_thread_percentage"), "100.0\n");
  EXPECT_EQ(Run("nonsense 1 2"), "Error: unrecognized command 'nonsense'\n");
}

TEST_F(MpsControlTest, QuitStopsServers) {
  Connect(100, 0);
  Reply r = control_.Handle("quit");
  EXPECT_TRUE(r.quit);
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(host_.stopped, std::vector<int32_t>{500});
  EXPECT_EQ(Run("get_server_list"), "");
}

TEST(LogFileTest, LinesLookLikeNvidias) {
  // 2026-02-06 09:34:17.770 in the local zone is not fixed; check the shape.
  std::string line = FormatLogLine(1'770'000'000'123'000'000, "Control", 261, "hello");
  ASSERT_GE(line.size(), 26u);
  EXPECT_EQ(line[0], '[');
  EXPECT_EQ(line.substr(20, 5), ".123 ");
  EXPECT_EQ(line.substr(25), "Control   261] hello\n");
}

constexpr char kUuid0[] = "GPU-11111111-2222-3333-4444-555555555555";
constexpr char kUuid1[] = "GPU-66666666-7777-8888-9999-000000000000";

constexpr char kV3Config[] = R"(schema_version = "1.0"
[servers.train]
allowed_devices = "GPU-11111111"
active_thread_percentage = "60"
pinned_memory_limit = "8G"
uid = 1000
[servers.train.namespaces.small]
active_thread_percentage = "25"
pinned_memory_limit = "2G"
[[servers.train.devices]]
uuid = "GPU-11111111-2222-3333-4444-555555555555"
  [[servers.train.devices.sm_partitions]]
  name = "quarter"
  chunks = 4
  [[servers.train.devices.sm_partitions]]
  name = "rest"
  chunks = 1
  include_remainder = true
)";

class MpsControlV3Test : public MpsControlTest {
 protected:
  void SetUp() override {
    auto config = ParseV3Config(kV3Config);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    ASSERT_TRUE(control_.EnableV3({std::move(*config), 8, {128, 128}}).ok());
  }
  std::string ConnectV3(int pid, int device, const std::string& route,
                        const std::string& partition = "-", const std::string& percent = "-") {
    return Run("__client_connect " + std::to_string(pid) + " 1000 " + std::to_string(device) + " " +
               percent + " - 0 " + route + " " + partition);
  }
};

TEST_F(MpsControlTest, AV2DaemonRefusesV3VerbsAndRoutes) {
  EXPECT_EQ(control_.protocol(), 2);
  EXPECT_EQ(Run("server list").rfind("Error:", 0), 0u) << Run("server list");
  EXPECT_EQ(Run("__client_connect 100 1000 0 - - 0 train -").rfind("ERROR bad_route", 0), 0u);
  EXPECT_EQ(Connect(100, 0), "OK 500 100 0 0\n") << "the legacy client still connects";
}

TEST_F(MpsControlV3Test, NamespacesCapTheirClientsAndTheServerGivesItsOwnLimits) {
  EXPECT_EQ(control_.protocol(), 3);
  EXPECT_EQ(Run("server list"), "train - STOPPED\n");
  // The server's default namespace: the server's limits.
  EXPECT_EQ(ConnectV3(100, 0, "train"), "OK 500 60 8589934592 0\n");
  EXPECT_EQ(Run("server list"), "train 500 ACTIVE\n");
  // A namespace caps what its client asks for.
  EXPECT_EQ(ConnectV3(101, 0, "train/small", "-", "90"), "OK 500 25 2147483648 0\n");
  EXPECT_EQ(ConnectV3(102, 0, "train/small", "-", "10"), "OK 500 10 2147483648 0\n");
  EXPECT_EQ(Run("namespace list --server=train"), "default 60.0 8G -\nsmall 25.0 2G -\n");
  EXPECT_EQ(Run("client list --all"),
            std::string("100 train default ") + kUuid0 + " 60 8589934592\n101 train small " +
                kUuid0 + " 25 2147483648\n102 train small " + kUuid0 + " 10 2147483648\n");
  // The legacy commands still work on a v3 daemon.
  EXPECT_EQ(Run("get_server_list"), "500\n");
  EXPECT_EQ(Run("get_client_list 500"), "100\n101\n102\n");
}

TEST_F(MpsControlV3Test, StaticSmPartitionsGiveTheirClientsTheirSms) {
  EXPECT_EQ(Run("sm_partition list --server=train"),
            std::string(kUuid0) + " quarter 32\n" + kUuid0 + " rest 96\n");
  // The fifth field: the SMs the client runs on.
  EXPECT_EQ(ConnectV3(100, 0, "train", "quarter"), "OK 500 25 8589934592 0 32\n");
  EXPECT_EQ(ConnectV3(101, 0, "train/small", "rest"), "OK 500 25 2147483648 0 32\n")
      << "the namespace's 25 % (32 SMs) is below the partition's 96";
  EXPECT_EQ(ConnectV3(102, 0, "train", "nope").rfind("ERROR bad_partition", 0), 0u);
}

TEST_F(MpsControlV3Test, RoutesAndDevicesAreChecked) {
  EXPECT_EQ(ConnectV3(100, 0, "infer").rfind("ERROR bad_route", 0), 0u);
  EXPECT_EQ(ConnectV3(100, 0, "train/big").rfind("ERROR bad_route", 0), 0u);
  EXPECT_EQ(ConnectV3(100, 1, "train").rfind("ERROR bad_device", 0), 0u)
      << "device 1 is not in allowed_devices";
  // No route: the server of the client's uid.
  EXPECT_EQ(ConnectV3(100, 0, "-"), "OK 500 60 8589934592 0\n");
  EXPECT_EQ(Run("namespace list --server=infer").rfind("Error:", 0), 0u);
  EXPECT_TRUE(host_.started == std::vector<uint32_t>{1000});
}

TEST_F(MpsControlV3Test, NamespacesCreatedAtRunTimeCapNewClients) {
  EXPECT_EQ(Run("namespace create --server=train --name=t1 --active-thread-percentage=30 "
                "--pinned-memory-limit=1G"),
            "");
  EXPECT_EQ(Run("namespace create --server=train --name=t1").rfind("Error:", 0), 0u);
  EXPECT_EQ(ConnectV3(100, 0, "train/t1"), "OK 500 30 1073741824 0\n");
  EXPECT_EQ(Run("namespace set --server train --name t1 --active-thread-percentage 20"), "");
  EXPECT_EQ(ConnectV3(101, 0, "train/t1"), "OK 500 20 1073741824 0\n") << "new clients only";
  EXPECT_EQ(Run("namespace list --server=train"),
            "default 60.0 8G -\nsmall 25.0 2G -\nt1 20.0 1G -\n");
  EXPECT_EQ(Run("namespace delete --server=train --name=t1"), "");
  EXPECT_EQ(ConnectV3(102, 0, "train/t1").rfind("ERROR bad_route", 0), 0u);
  EXPECT_EQ(Run("namespace create --server=infer --name=x").rfind("Error:", 0), 0u);
  EXPECT_EQ(Run("namespace create --server=train --name=x --colour=red").rfind("Error:", 0), 0u);
  EXPECT_EQ(Run("namespace set --server=train --name=nope --client-priority=1").rfind("Error:", 0),
            0u);
}

// Partitions made at run time (what the daemon does for a group's request):
// sized in chunks, refused beyond the free chunks, and a client in one runs
// on exactly its SMs even where no whole thread percentage gives that count
// (132 SMs: 32 is 24.2 %, whose floor(132 x 24 / 100) would be 31).
TEST_F(MpsControlTest, SmPartitionsMadeAtRunTimeGiveTheirClientsExactlyTheirSms) {
  auto config = ParseV3Config("schema_version = \"1.0\"\n[servers.g]\nallowed_devices = \"" +
                              std::string(kUuid0) + "\"\n");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_TRUE(control_.EnableV3({std::move(*config), 8, {132, 132}}).ok());
  EXPECT_EQ(Run("sm_partition info --server=g"), std::string(kUuid0) + " 132 8 16\n");
  EXPECT_EQ(Run(std::string("sm_partition create --server=g --device=") + kUuid0 +
                " --name=a --chunks=4"),
            "");
  EXPECT_EQ(
      Run(std::string("sm_partition create --server=g --device=") + kUuid0 + " --name=a --chunks=1")
          .rfind("Error:", 0),
      0u)
      << "a name once per device";
  EXPECT_EQ(Run(std::string("sm_partition create --server=g --device=") + kUuid0 +
                " --name=big --chunks=13")
                .rfind("Error:", 0),
            0u)
      << "12 chunks are free";
  EXPECT_EQ(
      Run(std::string("sm_partition create --server=g --device=") + kUuid1 + " --name=b --chunks=1")
          .rfind("Error:", 0),
      0u)
      << "not an allowed device";
  EXPECT_EQ(Run("sm_partition info --server=g"), std::string(kUuid0) + " 132 8 12\n");
  EXPECT_EQ(Run("sm_partition list --server=g"), std::string(kUuid0) + " a 32\n");
  EXPECT_EQ(Run("__client_connect 100 1000 0 - - 0 g a"), "OK 500 24 0 0 32\n");
  EXPECT_EQ(Run("__client_connect 101 1000 0 10 - 0 g a"), "OK 500 10 0 0 13\n")
      << "a thread percentage below the partition's share gives fewer";
  EXPECT_EQ(Run(std::string("sm_partition delete --server=g --device=") + kUuid0 + " --name=a"),
            "");
  EXPECT_EQ(Run("__client_connect 102 1000 0 - - 0 g a").rfind("ERROR bad_partition", 0), 0u);
  EXPECT_EQ(Run("sm_partition info --server=g"), std::string(kUuid0) + " 132 8 16\n");
}

TEST_F(MpsControlTest, AV3ConfigurationMustFitTheDaemonsDevices) {
  auto bad = [&](const std::string& text) {
    auto config = ParseV3Config(text);
    EXPECT_TRUE(config.ok()) << config.status().ToString();
    return control_.EnableV3({std::move(*config), 8, {128, 128}});
  };
  const std::string head = "schema_version = \"1.0\"\n[servers.s]\n";
  EXPECT_EQ(bad(head + "allowed_devices = \"GPU-99999999\"\n").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(bad(head + "[[servers.s.devices]]\nuuid = \"GPU-99999999\"\n").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(bad(head + "[[servers.s.devices]]\nuuid = \"" + kUuid1 +
                "\"\n[[servers.s.devices.sm_partitions]]\nname = \"all\"\nchunks = 17\n")
                .code(),
            StatusCode::kInvalidArgument)
      << "17 chunks of 8 SMs exceed 128";
  EXPECT_EQ(control_.protocol(), 2);
}

}  // namespace
}  // namespace gpuslice::sim::mps
