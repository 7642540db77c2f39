// The API-server side of Kubernetes end to end (issue 17; docs/kubernetes.md):
// the real gpusliced on a private simulated GPU, started with --kube-node
// against FakeKubeApi over TLS. A pod's gpuslice.io/* annotations become its
// group's limits, which a tenant registering in the pod's group gets; a
// change of the annotations applies live; a deleted pod's settings go; a bad
// value is reported as a Kubernetes Event; the node's GPUs are published as
// ResourceSlices.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/unix_http_client.h"
#include "tests/integration/support/daemon_ready.h"
#include "tests/integration/support/forked_tenant.h"
#include "tests/integration/support/sim_process_test.h"
#include "tests/support/fake_kube_api.h"

namespace gpuslice {
namespace {

using nlohmann::json;
using testing::WaitFor;
using namespace std::chrono_literals;

constexpr const char* kPods = "/api/v1/namespaces/team-a/pods";
constexpr const char* kSlices = "/apis/resource.k8s.io/v1/resourceslices";

class KubeDaemonTest : public testing::SimProcessTest {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    socket_ = dir_ + "/gpusliced.sock";
    tenants_.set_socket(socket_);
    const std::string api_dir = dir_ + "/api";
    mkdir(api_dir.c_str(), 0700);
    auto api = testing::FakeKubeApi::Start(api_dir);
    ASSERT_TRUE(api.ok()) << api.status().ToString();
    api_ = std::move(*api);
    api_->AcceptToken("node-token");
    token_file_ = api_dir + "/token";
    std::ofstream(token_file_) << "node-token\n";
    api_->Create("/api/v1/nodes", {{"metadata", {{"name", "node-1"}}}});
  }
  void TearDown() override {
    tenants_.KillAll();
    SimProcessTest::TearDown();
  }

  void StartDaemon(int n = 0) {
    daemon_ =
        StartProgram("gpusliced", n,
                     {"--socket", socket_, "--poll-interval-ms", "100", "--log-level", "debug",
                      "--state-dir", dir_ + "/state", "--kube-node", "node-1", "--kube-api",
                      api_->url(), "--kube-ca", api_->ca_file(), "--kube-token-file", token_file_},
                     {R"(GPUSLICE_SIM_CONFIG={"device_count":2})"});
    ASSERT_TRUE(testing::WaitForDaemonReady(socket_)) << Read("err" + std::to_string(n));
  }
  void StopDaemon() {
    ASSERT_GT(daemon_, 0);
    kill(daemon_, SIGTERM);
    EXPECT_EQ(Join(daemon_), 0);
    daemon_ = -1;
  }

  std::pair<int, json> Call(const std::string& method, const std::string& target) {
    auto r = cli::UnixHttpClient(socket_, 10s).Request(method, target, "");
    if (!r.ok()) return {0, nullptr};
    return {r->status, json::parse(r->body, nullptr, false)};
  }

  // The group's limits on every GPU ("all"), or null.
  json GroupLimits(const std::string& group) {
    auto [status, body] = Call("GET", "/v1/groups/" + group);
    if (status != 200) return nullptr;
    const json& g = body.contains("group") ? body["group"] : body;
    if (!g.contains("limits") || !g["limits"].contains("all")) return nullptr;
    return g["limits"]["all"];
  }

  // The limit GET /v1/tenants shows for `pid` on its first GPU, or null.
  json TenantLimit(pid_t pid) {
    auto [status, body] = Call("GET", "/v1/tenants");
    if (status != 200) return nullptr;
    for (const json& t : body["tenants"]) {
      if (t["host_pid"] == pid && !t["gpus"].empty()) return t["gpus"][0]["limit"];
    }
    return nullptr;
  }

  std::string socket_;
  std::string token_file_;
  pid_t daemon_ = -1;
  std::unique_ptr<testing::FakeKubeApi> api_;
  testing::ForkedTenants tenants_;
};

TEST_F(KubeDaemonTest, APodsAnnotationsAreTheLimitsItsTenantGets) {
  json pod = api_->Create(kPods, {{"metadata",
                                   {{"name", "trainer"},
                                    {"annotations",
                                     {{"gpuslice.io/memory", "4Gi"},
                                      {"gpuslice.io/cores", "30"},
                                      {"gpuslice.io/priority", "latency"}}}}},
                                  {"spec", {{"nodeName", "node-1"}}}});
  api_->Create(
      kPods, {{"metadata", {{"name", "elsewhere"}, {"annotations", {{"gpuslice.io/cores", "10"}}}}},
              {"spec", {{"nodeName", "node-2"}}}});
  const std::string group = "pod-" + pod["metadata"]["uid"].get<std::string>();
  StartDaemon();

  ASSERT_TRUE(WaitFor([&] { return !GroupLimits(group).is_null(); }, 10s)) << Read("err0");
  EXPECT_EQ(GroupLimits(group),
            (json{{"memory_bytes", uint64_t{4} << 30}, {"compute_percent", 30}}));

  // A process of the pod registers in the pod's group and is told those limits.
  testing::ForkedTenant t = tenants_.Start(json{{"group", group}, {"devices", {0}}}.dump(), {});
  ASSERT_EQ(t.status, 201) << t.body.dump();
  const json& limits = t.body["effective_limits"].begin().value();
  EXPECT_EQ(limits["memory_bytes"], uint64_t{4} << 30);
  EXPECT_EQ(limits["compute_percent"], 30);

  // A change of the annotation applies live.
  api_->Modify(std::string(kPods) + "/trainer",
               [](json& p) { p["metadata"]["annotations"]["gpuslice.io/cores"] = "50"; });
  EXPECT_TRUE(WaitFor([&] { return TenantLimit(t.pid)["compute_percent"] == 50; }, 10s))
      << TenantLimit(t.pid).dump();

  // A bad value is reported on the pod and changes nothing.
  api_->Modify(std::string(kPods) + "/trainer",
               [](json& p) { p["metadata"]["annotations"]["gpuslice.io/memory"] = "a lot"; });
  ASSERT_TRUE(
      WaitFor([&] { return !api_->List("/api/v1/namespaces/team-a/events").empty(); }, 10s));
  EXPECT_EQ(api_->List("/api/v1/namespaces/team-a/events")[0]["reason"],
            "InvalidGpusliceAnnotation");
  EXPECT_EQ(TenantLimit(t.pid)["memory_bytes"], uint64_t{4} << 30);

  // The pod goes: its group keeps its member but no longer its limits.
  api_->Remove(std::string(kPods) + "/trainer");
  EXPECT_TRUE(WaitFor([&] { return TenantLimit(t.pid)["compute_percent"].is_null(); }, 10s))
      << TenantLimit(t.pid).dump();
  for (const auto& r : api_->Requests()) {
    if (r.path == "/api/v1/pods") {
      EXPECT_EQ(r.query.at("fieldSelector"), "spec.nodeName=node-1");
      EXPECT_EQ(r.token, "node-token");
    }
  }
}

// The daemon checkpoints the groups' settings; a pod deleted while it was
// down must not keep them when it comes back (the first LIST reconciles).
TEST_F(KubeDaemonTest, APodDeletedWhileTheDaemonWasDownLosesItsSettingsAtStart) {
  json gone = api_->Create(
      kPods, {{"metadata", {{"name", "gone"}, {"annotations", {{"gpuslice.io/cores", "30"}}}}},
              {"spec", {{"nodeName", "node-1"}}}});
  json kept = api_->Create(
      kPods, {{"metadata", {{"name", "kept"}, {"annotations", {{"gpuslice.io/cores", "40"}}}}},
              {"spec", {{"nodeName", "node-1"}}}});
  const std::string gone_group = "pod-" + gone["metadata"]["uid"].get<std::string>();
  const std::string kept_group = "pod-" + kept["metadata"]["uid"].get<std::string>();
  StartDaemon();
  ASSERT_TRUE(WaitFor([&] { return !GroupLimits(gone_group).is_null(); }, 10s)) << Read("err0");
  ASSERT_TRUE(WaitFor([&] { return !GroupLimits(kept_group).is_null(); }, 10s));
  StopDaemon();

  api_->Remove(std::string(kPods) + "/gone");
  StartDaemon(1);
  EXPECT_TRUE(WaitFor([&] { return Call("GET", "/v1/groups/" + gone_group).first == 404; }, 10s))
      << Call("GET", "/v1/groups/" + gone_group).second.dump() << Read("err1");
  // It was restored from the checkpoint and dropped by the reconcile. The
  // daemon logs the drop after the group is gone (PodWatch::Forget), so the
  // 404 can be seen before the line is written: wait for it.
  EXPECT_TRUE(WaitFor(
      [&] { return Read("err1").find("pod gone while the daemon was down") != std::string::npos; },
      10s))
      << Read("err1");
  EXPECT_EQ(GroupLimits(kept_group)["compute_percent"], 40);
}

TEST_F(KubeDaemonTest, TheNodesGpusArePublishedAsResourceSlices) {
  StartDaemon();
  ASSERT_TRUE(WaitFor([&] { return api_->List(kSlices).size() == 2; }, 20s)) << Read("err0");
  json node = *api_->Get("/api/v1/nodes/node-1");
  for (const json& s : api_->List(kSlices)) {
    EXPECT_EQ(s["spec"]["nodeName"], "node-1");
    EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], 2);
    EXPECT_EQ(s["metadata"]["ownerReferences"][0]["uid"], node["metadata"]["uid"]);
    const json& d = s["spec"]["devices"][0];
    EXPECT_TRUE(d["allowMultipleAllocations"].get<bool>());
    EXPECT_TRUE(d["attributes"]["uuid"]["string"].get<std::string>().starts_with("GPU-"));
    EXPECT_GT(std::stoull(d["capacity"]["memory"]["value"].get<std::string>()), 0u);
    // From NVML: the simulator's compute capability and driver version, as versions.
    EXPECT_TRUE(d["attributes"].contains("computeCapability")) << d.dump();
    EXPECT_TRUE(d["attributes"].contains("driverVersion")) << d.dump();
    const std::string cc = d["attributes"].value("/computeCapability/version"_json_pointer, "");
    EXPECT_EQ(std::count(cc.begin(), cc.end(), '.'), 2) << cc;
  }
}

}  // namespace
}  // namespace gpuslice
