#include "daemon/api/tenant_routes.h"

#include <gtest/gtest.h>

#include "daemon/api/tenant_routes_fixture.h"
#include "daemon/mps/fake_mps.h"
#include "daemon/tenants/tenant_metrics.h"

namespace gpuslice::daemon {
namespace {

using nlohmann::json;
using namespace std::string_literals;

class TenantRoutesTest : public TenantRoutesFixture {
 protected:
  void SetUp() override {
    TenantRoutesOptions options;
    options.is_admin = [](const Caller& c) {
      return c.via_tcp ? c.token_ok : c.uid && *c.uid == 0;
    };
    options.tiers = tiers_;
    // gpusliced's group control says group "g" ran 40 % of GPU 0 and
    // nothing is known of GPU 1 (a member controls it, say, and published no
    // share yet).
    options.share_of = [](const std::string& group,
                          const std::string& uuid) -> std::optional<TenantRoutesOptions::Share> {
      if (group != "g") return std::nullopt;
      if (uuid == "GPU-fake-0")
        return TenantRoutesOptions::Share{.grant_bp = 5000, .share_bp = 4000};
      return TenantRoutesOptions::Share{.grant_bp = std::nullopt, .share_bp = -1};
    };
    // A member of "g" was once evicted from its ledger lock.
    options.ledger_evictions_of = [](const std::string& group) {
      return group == "g" ? std::optional<uint64_t>(1) : std::nullopt;
    };
    Install(options);
  }
  // The metrics, with the same group control's shares.
  std::string Metrics() {
    return FormatTenantMetrics(
        registry_, *usage_.Current(), [](const std::string& group, const std::string& uuid) {
          return group == "g" && uuid == "GPU-fake-0" ? std::optional<int32_t>(4000) : std::nullopt;
        });
  }

  GroupTiers* tiers_ = nullptr;
};

TEST_F(TenantRoutesTest, AProcessRegistersItselfAndGetsItsEffectiveLimits) {
  ASSERT_EQ(Call("PUT", "/v1/groups/train",
                 R"({"limits": {"all": {"memory": "8GiB", "compute_percent": 50}}})", Root())
                .status,
            200);
  auto r = Call("POST", "/v1/tenants",
                R"({"group": "train", "devices": [1], "tier": "shared",
                    "limits": {"memory_bytes": 1073741824, "compute_percent": 80},
                    "hints": {"pod_name": "web-0", "pod_namespace": "prod"}})",
                Unix(100, 1000));
  ASSERT_EQ(r.status, 201) << r.body;
  json b = Body(r);
  EXPECT_EQ(b["tenant"]["host_pid"], 100);
  EXPECT_EQ(b["tenant"]["container_pid"], 1);
  EXPECT_EQ(b["tenant"]["pod_uid"], kPod);
  EXPECT_EQ(b["tenant"]["pod"], "web-0");
  EXPECT_EQ(b["tenant"]["hint_conflicts"].size(), 0u);
  EXPECT_EQ(b["tenant"]["devices"], json::array({"GPU-fake-1"}));
  // Memory lowered by the tenant, compute kept at the group's 50.
  EXPECT_EQ(b["effective_limits"]["GPU-fake-1"]["memory_bytes"], 1u << 30);
  EXPECT_EQ(b["effective_limits"]["GPU-fake-1"]["compute_percent"], 50);
  EXPECT_EQ(b["group"]["owner"]["uid"], 1000);
  EXPECT_EQ(EventTypes(), (std::vector<std::string>{"group_limits_changed", "tenant_registered"}));
  // No devices named: every GPU. The body may number the process in its own namespace.
  auto all = Call("POST", "/v1/tenants", R"({"group": "train", "pid": 7})", Unix(101, 1000));
  ASSERT_EQ(all.status, 201) << all.body;
  EXPECT_EQ(Body(all)["tenant"]["devices"].size(), 2u);
}

TEST_F(TenantRoutesTest, ARegistrationsLimitsMayBeGivenPerGpu) {
  auto r = Call("POST", "/v1/tenants",
                R"({"group": "train", "limits": {"GPU-fake-1": {"memory": "1GiB"},
                    "0": {"compute_percent": 30}, "all": {"memory": "4GiB"}}})",
                Unix(100, 1000));
  ASSERT_EQ(r.status, 201) << r.body;
  json b = Body(r);
  EXPECT_EQ(b["effective_limits"]["GPU-fake-0"]["memory_bytes"], 4ull << 30);
  EXPECT_EQ(b["effective_limits"]["GPU-fake-0"]["compute_percent"], 30);
  EXPECT_EQ(b["effective_limits"]["GPU-fake-1"]["memory_bytes"], 1u << 30);
  EXPECT_TRUE(b["effective_limits"]["GPU-fake-1"]["compute_percent"].is_null());
  EXPECT_EQ(b["tenant"]["requested_limits"]["GPU-fake-0"]["compute_percent"], 30);
  // The listing's per-GPU limit is the same.
  auto list = Body(Call("GET", "/v1/tenants", "", Root()));
  EXPECT_EQ(list["tenants"][0]["gpus"][1]["limit"]["memory_bytes"], 1u << 30);
  EXPECT_EQ(list["tenants"][0]["gpus"][0]["limit"]["compute_percent"], 30);
  // The single form still means every GPU.
  auto one = Call("POST", "/v1/tenants", R"({"group": "train", "limits": {"memory": "2GiB"}})",
                  Unix(101, 1000));
  ASSERT_EQ(one.status, 201) << one.body;
  EXPECT_EQ(Body(one)["effective_limits"]["GPU-fake-1"]["memory_bytes"], 2u << 30);
  EXPECT_EQ(Body(one)["tenant"]["requested_limits"]["all"]["memory_bytes"], 2u << 30);
}

TEST_F(TenantRoutesTest, MalformedRegistrationsAre400NamingTheField) {
  struct Case {
    std::string body, message;
  };
  for (const Case& c : std::vector<Case>{
           {"{group: ", "not valid JSON"},
           {"[1]", "must be a JSON object"},
           {R"({"devices": [0]})", "\"group\" is required"},
           {R"({"group": 5})", "\"group\" is required"},
           {R"({"group": "a b"})", "must be 1-64 characters"},
           {R"({"group": "g", "devices": "0"})", "\"devices\""},
           {R"({"group": "g", "devices": [7]})", "\"devices\": no GPU 7"},
           {R"({"group": "g", "tier": "gold"})", "\"tier\""},
           {R"({"group": "g", "limits": {"compute_percent": 0}})", "limits.compute_percent"},
           {R"({"group": "g", "limits": {"memory": "lots"}})", "limits.memory"},
           {R"({"group": "g", "limits": {"gpu_memory": 1}})",
            "unknown field \"limits.gpu_memory\""},
           {R"({"group": "g", "limits": {"9": {"memory": 1}}})",
            "unknown field \"limits.9\": neither a limit"},
           {R"({"group": "g", "limits": {"0": {"memory": "x"}}})", "limits.0.memory"},
           {R"({"group": "g", "limits": {"0": 5}})", "\"limits.0\" must be an object"},
           {R"({"group": "g", "limits": {"memory": 1, "0": {}}})", "unknown field \"limits.0\""},
           {R"({"group": "g", "limits": 7})", "\"limits\" must be an object"},
           {R"({"group": "g", "hints": {"pod_name": 3}})", "hints.pod_name"},
           {R"({"group": "g", "pid": -4})", "\"pid\""},
           {R"({"group": "g", "colour": "red"})", "unknown field \"colour\""},
       }) {
    auto r = Call("POST", "/v1/tenants", c.body, Unix(100, 1000));
    EXPECT_EQ(r.status, 400) << c.body << ": " << r.body;
    const std::string message = json::parse(r.body)["error"]["message"];
    EXPECT_NE(message.find(c.message), std::string::npos) << c.body << ": " << message;
  }
  EXPECT_TRUE(registry_.Tenants().empty());
  EXPECT_TRUE(registry_.Groups().empty());
}

// Found by tests/fuzz/http_request_fuzz: a hint that conflicts with a
// POD_NAME that is not UTF-8 threw out of the registry (the daemon died).
TEST_F(TenantRoutesTest, AProcessEnvironmentThatIsNotUtf8IsQuotedSafely) {
  proc_.Add(102, "102", 1000, 13, "0::/user.slice/s.scope\n", "POD_NAME=\xff\xfe\0"s);
  auto r = Call("POST", "/v1/tenants", R"({"group": "g", "hints": {"pod_name": "web-1"}})",
                Unix(102, 1000));
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(Body(r)["tenant"]["hint_conflicts"].size(), 1u) << r.body;
  EXPECT_EQ(Call("GET", "/v1/tenants", "", Unix(102, 1000)).status, 200);
}

TEST_F(TenantRoutesTest, AUnixClientRegistersOnlyItselfAndTcpNeedsATokenAndAPid) {
  auto other = Call("POST", "/v1/tenants", R"({"group": "g", "pid": 101})", Unix(100, 1000));
  EXPECT_EQ(other.status, 403);
  EXPECT_NE(other.body.find("can only register itself"), std::string::npos) << other.body;
  // Pid 100's connection, from 10.0.0.5:40000 to our 10.0.0.1:7777.
  const TcpEndpoint client{{10, 0, 0, 5}, true, 40000};
  const TcpEndpoint server{{10, 0, 0, 1}, true, 7777};
  proc_.AddTcpSocket(100, client, server, 424242);
  Caller tcp{std::nullopt, std::nullopt, std::nullopt, true, false, client, server};
  EXPECT_EQ(Call("POST", "/v1/tenants", R"({"group": "g", "pid": 100})", tcp).status, 403);
  tcp.token_ok = true;
  EXPECT_EQ(Call("POST", "/v1/tenants", R"({"group": "g"})", tcp).status, 400);
  EXPECT_EQ(Call("POST", "/v1/tenants", R"({"group": "g", "pid": 999})", tcp).status, 403);
  auto ok = Call("POST", "/v1/tenants", R"({"group": "g", "pid": 100})", tcp);
  ASSERT_EQ(ok.status, 201) << ok.body;
  EXPECT_EQ(Body(ok)["tenant"]["uid"], 1000);  // the process's, from /proc
}

TEST_F(TenantRoutesTest, ATcpRegistrationClaimingAnotherProcesssPidIsRefused) {
  const TcpEndpoint client{{10, 0, 0, 5}, true, 40000};
  const TcpEndpoint server{{10, 0, 0, 1}, true, 7777};
  proc_.AddTcpSocket(100, client, server, 424242);
  const Caller tcp{std::nullopt, std::nullopt, std::nullopt, true, true, client, server};
  // 101 exists but holds no such connection: the token is no proof of it.
  auto r = Call("POST", "/v1/tenants", R"({"group": "g", "pid": 101})", tcp);
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(r.body.find("pid 101 does not hold this connection (10.0.0.5:40000)"),
            std::string::npos)
      << r.body;
  // Another connection of pid 100's (another client port) is not this one.
  Caller elsewhere = tcp;
  elsewhere.tcp_client->port = 40001;
  EXPECT_EQ(Call("POST", "/v1/tenants", R"({"group": "g", "pid": 100})", elsewhere).status, 403);
  EXPECT_EQ(registry_.MemberCount("g"), 0u);
}

TEST_F(TenantRoutesTest, AnotherUidIsRefusedFromAnotherUsersGroup) {
  ASSERT_EQ(Call("POST", "/v1/tenants", R"({"group": "g"})", Unix(100, 1000)).status, 201);
  auto r = Call("POST", "/v1/tenants", R"({"group": "g"})", Unix(300, 65534));
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(r.body.find("belongs to uid 1000"), std::string::npos) << r.body;
  EXPECT_EQ(events_.back().first, "registration_refused");
  EXPECT_EQ(registry_.MemberCount("g"), 1u);
}

TEST_F(TenantRoutesTest, ForgedHintsAreFlaggedInTheRecord) {
  auto r = Call(
      "POST", "/v1/tenants",
      R"({"group": "g", "hints": {"pod_name": "db-0", "pod_uid": "bbbbbbbb-1111-2222-3333-444444444444"}})",
      Unix(100, 1000));
  ASSERT_EQ(r.status, 201);
  json t = Body(r)["tenant"];
  EXPECT_EQ(t["pod_uid"], kPod);
  EXPECT_EQ(t["pod"], "") << "a name the process's environment contradicts is not shown";
  EXPECT_EQ(t["claimed_pod_uid"], "bbbbbbbb-1111-2222-3333-444444444444");
  EXPECT_EQ(t["hint_conflicts"].size(), 2u);
}

TEST_F(TenantRoutesTest, ListsTenantsWithTheDriversMemoryAndShare) {
  ASSERT_EQ(
      Call("POST", "/v1/tenants", R"({"group": "g", "devices": ["GPU-fake-0"]})", Unix(100, 1000))
          .status,
      201);
  ASSERT_EQ(
      Call("POST", "/v1/tenants", R"({"group": "g", "devices": [1]})", Unix(101, 1000)).status,
      201);
  backend_.SetProcesses(0, {{100, 3u << 20}, {4242, 1u << 20}});
  backend_.SetProcesses(1, {{101, 5u << 20}});
  // NVML's per-process sample says 90 %: the share is the group control's,
  // never a per-process sample (docs/scheduling.md "Evidence").
  backend_.AddUtilization(0, {{100, 10, 90}});
  usage_.Refresh(ReadProcesses(backend_, *monitor_.Current(), std::nullopt));
  auto r = Call("GET", "/v1/tenants", "", Unix(300, 65534));
  ASSERT_EQ(r.status, 200);
  json list = Body(r)["tenants"];
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["host_pid"], 100);
  EXPECT_EQ(list[0]["container_pid"], 1);
  EXPECT_EQ(list[0]["namespace"], "");
  ASSERT_EQ(list[0]["gpus"].size(), 1u);
  EXPECT_EQ(list[0]["gpus"][0]["memory_used_bytes"], 3u << 20);
  // Two members of g: no tenant of it has a share of its own.
  EXPECT_EQ(list[0]["gpus"][0]["share"], nullptr);
  EXPECT_EQ(list[1]["gpus"][0]["uuid"], "GPU-fake-1");
  EXPECT_EQ(list[1]["gpus"][0]["memory_used_bytes"], 5u << 20);
  EXPECT_EQ(list[1]["gpus"][0]["share"], nullptr);
  EXPECT_EQ(Body(Call("GET", "/v1/tenants", "", Root(), {{"group", "none"}}))["tenants"].size(),
            0u);
  json g = Body(Call("GET", "/v1/groups/g", "", Root()));
  EXPECT_EQ(g["members"], json::array({100, 101}));
  EXPECT_EQ(g["gpus"][0]["memory_used_bytes"], 3u << 20);
  EXPECT_EQ(g["gpus"][0]["share"], 0.4);
  EXPECT_EQ(g["gpus"][0]["grant_percent"], 50.0);
  EXPECT_EQ(g["gpus"][1]["share"], nullptr);
  EXPECT_EQ(g["ledger_evictions"], 1);

  std::string metrics = Metrics();
  EXPECT_NE(metrics.find("gpuslice_group_tenants{group=\"g\",pod=\"\",namespace=\"\"} 2\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("gpuslice_group_memory_used_bytes{group=\"g\",pod=\"\",namespace=\"\","
                         "gpu=\"0\",uuid=\"GPU-fake-0\"} 3145728\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("gpuslice_tenant_memory_used_bytes{group=\"g\",pod=\"\",namespace=\"\","
                         "container=\"\",pid=\"101\",gpu=\"1\",uuid=\"GPU-fake-1\"} 5242880\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("gpuslice_group_compute_share_ratio{group=\"g\",pod=\"\",namespace=\"\","
                         "gpu=\"0\",uuid=\"GPU-fake-0\"} 0.4\n"),
            std::string::npos)
      << metrics;
  EXPECT_EQ(metrics.find("gpuslice_group_compute_share_ratio{group=\"g\",pod=\"\",namespace=\"\","
                         "gpu=\"1\""),
            std::string::npos)
      << metrics;  // not known there
  EXPECT_EQ(metrics.find("gpuslice_tenant_compute_share_ratio{"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("gpuslice_registrations_refused_total 0\n"), std::string::npos);

  // A group's only member has the group's share.
  ASSERT_EQ(Call("DELETE", "/v1/tenants/101", "", Root()).status, 200);
  list = Body(Call("GET", "/v1/tenants", "", Root()))["tenants"];
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["gpus"][0]["share"], 0.4);
  metrics = Metrics();
  EXPECT_NE(metrics.find("gpuslice_tenant_compute_share_ratio{group=\"g\",pod=\"\",namespace=\"\","
                         "container=\"\",pid=\"100\",gpu=\"0\",uuid=\"GPU-fake-0\"} 0.4\n"),
            std::string::npos)
      << metrics;
}

TEST_F(TenantRoutesTest, OnlyTheTenantItselfOrAnAdminUnregisters) {
  ASSERT_EQ(Call("POST", "/v1/tenants", R"({"group": "g"})", Unix(100, 1000)).status, 201);
  ASSERT_EQ(Call("POST", "/v1/tenants", R"({"group": "g"})", Unix(101, 1000)).status, 201);
  EXPECT_EQ(Call("DELETE", "/v1/tenants/100", "", Unix(300, 65534)).status, 403);
  EXPECT_EQ(Call("DELETE", "/v1/tenants/abc", "", Root()).status, 400);
  EXPECT_EQ(Call("DELETE", "/v1/tenants/555", "", Root()).status, 404);
  EXPECT_EQ(Call("DELETE", "/v1/tenants/100", "", Unix(100, 1000)).status, 200);
  EXPECT_EQ(Call("DELETE", "/v1/tenants/101", "", Root()).status, 200);
  EXPECT_TRUE(registry_.Tenants().empty());
  EXPECT_EQ(events_.back().first, "tenant_exited");
}

TEST_F(TenantRoutesTest, GroupsAreSetByAdminsAndForgottenWhenEmpty) {
  // The server lets only admins through to these routes.
  EXPECT_EQ(router_.Find("PUT", "/v1/groups/g")->access, Access::kMutate);
  EXPECT_EQ(router_.Find("DELETE", "/v1/groups/g")->access, Access::kMutate);
  EXPECT_EQ(router_.Find("POST", "/v1/tenants")->access, Access::kRead);
  auto put = Call(
      "PUT", "/v1/groups/g",
      R"({"limits": {"all": {"compute_percent": 30}, "1": {"memory": "2GiB"}}, "tier": "mps"})",
      Root());
  ASSERT_EQ(put.status, 200) << put.body;
  json g = Body(put);
  EXPECT_EQ(g["tier"], "mps");
  EXPECT_EQ(g["limits"]["GPU-fake-1"]["memory_bytes"], 2u << 30);
  EXPECT_EQ(g["owner"]["uid"], nullptr);
  EXPECT_EQ(Call("PUT", "/v1/groups/g", R"({"limits": {"9": {"memory": 1}}})", Root()).status, 400);
  EXPECT_EQ(
      Call("PUT", "/v1/groups/g", R"({"limits": {"all": {"compute": "150%"}}})", Root()).status,
      400);
  EXPECT_EQ(Call("PUT", "/v1/groups/g", R"({"max": 1})", Root()).status, 400);
  ASSERT_EQ(Call("POST", "/v1/tenants", R"({"group": "g"})", Unix(100, 1000)).status, 201);
  usage_.Refresh(ReadProcesses(backend_, *monitor_.Current(), std::nullopt));
  json listed = Body(Call("GET", "/v1/groups", "", Root()))["groups"];
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["owner"]["uid"], 1000);
  EXPECT_EQ(listed[0]["gpus"][1]["limit"]["memory_bytes"], 2u << 30);
  EXPECT_EQ(listed[0]["gpus"][1]["limit"]["compute_percent"], 30);
  auto busy = Call("DELETE", "/v1/groups/g", "", Root());
  EXPECT_EQ(busy.status, 409);
  EXPECT_NE(busy.body.find("1 live member"), std::string::npos) << busy.body;
  registry_.OnExited({100});
  EXPECT_EQ(Call("DELETE", "/v1/groups/g", "", Root()).status, 200);
  EXPECT_EQ(Call("GET", "/v1/groups/g", "", Root()).status, 404);
  EXPECT_EQ(Call("DELETE", "/v1/groups/g", "", Root()).status, 404);
}

}  // namespace
}  // namespace gpuslice::daemon

namespace gpuslice::daemon {
namespace {

// With MPS on the fake host (the manager's test model of the control tool).
class TenantRoutesMpsTest : public TenantRoutesTest {
 protected:
  void SetUp() override {
    gpus_.uuids = {"GPU-fake-0", "GPU-fake-1"};  // the fake backend's
    ASSERT_TRUE(manager_.Start().ok());
    tiers_ = &group_tiers_;
    TenantRoutesTest::SetUp();
  }

  mps::testing::FakeGpus gpus_{2};
  mps::testing::FakeHost host_{clock_};
  mps::MpsManager manager_{{.root = "/mps"}, gpus_, host_, clock_};
  GroupTiers group_tiers_{registry_, manager_};
};

TEST_F(TenantRoutesMpsTest, AnMpsRegistrationGetsTheTierAndTheClientEnvironment) {
  ASSERT_EQ(Call("PUT", "/v1/groups/train",
                 R"({"tier": "mps", "limits": {"all": {"memory": "8GiB", "compute_percent": 40}}})",
                 Root())
                .status,
            200);
  auto r = Call("POST", "/v1/tenants", R"({"group": "train", "devices": [1], "tier": "mps"})",
                Unix(100, 1000));
  ASSERT_EQ(r.status, 201) << r.body;
  json b = Body(r);
  EXPECT_EQ(b["tier"], "mps");
  EXPECT_EQ(b["tier_reason"], "");
  EXPECT_EQ(b["env"]["CUDA_MPS_PIPE_DIRECTORY"], "/mps/GPU-fake-1/pipe");
  EXPECT_EQ(b["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "40");
  EXPECT_EQ(b["env"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=8G");
  EXPECT_EQ(b["mps_gpus"][0]["uuid"], "GPU-fake-1");
  EXPECT_EQ(manager_.Tenants().at(0).name, "train");

  json tenants = Body(Call("GET", "/v1/tenants", "", Unix(300, 65534)));
  EXPECT_EQ(tenants["tenants"][0]["tier"], "mps");
  EXPECT_EQ(tenants["tenants"][0]["tier_granted"], "mps");
  json group = Body(Call("GET", "/v1/groups/train", "", Unix(300, 65534)));
  EXPECT_EQ(group["tier_granted"], "mps");
  EXPECT_EQ(group["mps_gpus"], json::array({"GPU-fake-1"}));

  // Unregistering the last member releases the group's MPS tenant.
  ASSERT_EQ(Call("DELETE", "/v1/tenants/100", "", Unix(100, 1000)).status, 200);
  group_tiers_.ReleaseIfUnused("train");  // the daemon's event sink calls TenantLeft
  EXPECT_TRUE(manager_.Tenants().empty());
  EXPECT_TRUE(Body(Call("GET", "/v1/groups/train", "", Root()))["tier_granted"].is_null());
}

TEST_F(TenantRoutesMpsTest, SharedAndOtherGroupsMpsAreRefusedOnOneGpu) {
  ASSERT_EQ(Call("PUT", "/v1/groups/train", R"({"tier": "mps"})", Root()).status, 200);
  ASSERT_EQ(
      Call("POST", "/v1/tenants", R"({"group": "train", "devices": [1]})", Unix(100, 1000)).status,
      201);
  // A shared tenant on the GPU of train's MPS server: refused, train named.
  auto r = Call("POST", "/v1/tenants", R"({"group": "web", "devices": [1], "tier": "shared"})",
                Unix(101, 1000));
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_NE(r.body.find("train"), std::string::npos) << r.body;
  // On the other GPU it is fine.
  r = Call("POST", "/v1/tenants", R"({"group": "web", "devices": [0], "tier": "shared"})",
           Unix(101, 1000));
  EXPECT_EQ(r.status, 201) << r.body;
  // An mps group's tenant on the GPU where web's shared tenant runs: refused.
  ASSERT_EQ(Call("PUT", "/v1/groups/infer", R"({"tier": "mps"})", Root()).status, 200);
  r = Call("POST", "/v1/tenants", R"({"group": "infer", "devices": [0]})", Unix(102, 1000));
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_NE(r.body.find("web"), std::string::npos) << r.body;
}

TEST_F(TenantRoutesMpsTest, AFallbackToSharedIsInTheReplyAndTheViews) {
  host_.binary_installed = false;
  mps::MpsManager manager({.root = "/other"}, gpus_, host_, clock_);
  ASSERT_TRUE(manager.Start().ok());
  GroupTiers tiers(registry_, manager);
  ApiRouter router;
  TenantRoutesOptions options;
  options.proc_root = proc_.root();
  options.tiers = &tiers;
  AddTenantRoutes(router, registry_, monitor_, usage_, options);
  auto call = [&](const std::string& method, const std::string& path, const std::string& body,
                  const Caller& caller) {
    auto m = router.Find(method, path);
    EXPECT_TRUE(m.ok());
    return (*m->handler)(ApiRequest{method, path, {}, m->params, body, caller});
  };
  auto r = call("POST", "/v1/tenants", R"({"group": "g", "tier": "mps"})", Unix(100, 1000));
  ASSERT_EQ(r.status, 201) << r.body;
  json b = Body(r);
  EXPECT_EQ(b["tier"], "shared");
  EXPECT_NE(b["tier_reason"].get<std::string>().find("not found"), std::string::npos) << b;
  EXPECT_TRUE(b["env"].empty());
  json tenants = Body(call("GET", "/v1/tenants", "", Unix(300, 65534)));
  EXPECT_EQ(tenants["tenants"][0]["tier"], "mps") << "the tier the group asks for";
  EXPECT_EQ(tenants["tenants"][0]["tier_granted"], "shared");
  EXPECT_EQ(tenants["tenants"][0]["tier_reason"], b["tier_reason"]);
  json groups = Body(call("GET", "/v1/groups", "", Unix(300, 65534)));
  EXPECT_EQ(groups["groups"][0]["tier_granted"], "shared");
  EXPECT_EQ(groups["groups"][0]["tier_reason"], b["tier_reason"]);
}

TEST_F(TenantRoutesMpsTest, ASharedRegistrationHasNoEnvironment) {
  auto r = Call("POST", "/v1/tenants", R"({"group": "g"})", Unix(100, 1000));
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(Body(r)["tier"], "shared");
  EXPECT_EQ(Body(r)["tier_reason"], "");
  EXPECT_TRUE(Body(r)["env"].empty());
  EXPECT_TRUE(manager_.Tenants().empty());
}

}  // namespace
}  // namespace gpuslice::daemon
