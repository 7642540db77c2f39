#include "daemon/kube/pod_watch.h"

#include <gtest/gtest.h>

#include <condition_variable>

#include "daemon/kube/kube_test_util.h"
#include "daemon/tenants/fake_proc.h"

namespace gpuslice::daemon::kube {
namespace {

using nlohmann::json;
using std::chrono::seconds;

// Records the calls; WaitFor waits on a condition with a deadline.
class RecordingTarget final : public GroupSettingsTarget {
 public:
  Status Apply(const std::string& group, const PodSettings& s) override {
    std::lock_guard lock(mu_);
    calls_.push_back("apply " + group + " " + PodSettingsJson(s).dump());
    cv_.notify_all();
    return refuse_;
  }
  Status Drop(const std::string& group) override {
    std::lock_guard lock(mu_);
    calls_.push_back("drop " + group);
    cv_.notify_all();
    return Status::Ok();
  }
  std::vector<std::string> PodGroups() const override {
    std::lock_guard lock(mu_);
    return restored_;
  }
  void Restored(std::vector<std::string> groups) {
    std::lock_guard lock(mu_);
    restored_ = std::move(groups);
  }
  bool WaitForCalls(size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, seconds(10), [&] { return calls_.size() >= n; });
  }
  std::vector<std::string> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }
  Status refuse_;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> calls_;
  std::vector<std::string> restored_;
};

json Pod(const std::string& name, const std::string& node, json annotations) {
  return {{"metadata", {{"name", name}, {"annotations", std::move(annotations)}}},
          {"spec", {{"nodeName", node}}}};
}

// A pod in namespace team-a whose one container asks for `resources`
// (resources.limits).
json DpPod(const std::string& name, json annotations, json resources) {
  return {{"metadata",
           {{"name", name},
            {"namespace", "team-a"},
            {"uid", "0a0b0c0d-0000-0000-0000-" + std::string(12 - name.size(), '0') + name},
            {"annotations", std::move(annotations)}}},
          {"spec",
           {{"nodeName", "n1"},
            {"containers",
             json::array({{{"name", "main"}, {"resources", {{"limits", resources}}}}})}}}};
}

// Rule 6: a pod using the device plugins has its settings sent to them, by
// name, and nothing applied to its pod group; a pod without them is as before.
TEST(PodWatchDevicePlugins, APodUsingTheDevicePluginsHasItsSettingsSentToThem) {
  RecordingTarget target;
  PodWatch watch(target, {});
  std::vector<std::pair<std::string, std::optional<PodSettings>>> told;
  watch.SetDevicePluginPods([&](const std::string& pod, const std::optional<PodSettings>& s) {
    told.emplace_back(pod, s);
  });
  const json vgpu = {{"gpuslice.io/vgpu", "1"}};
  json trainer = DpPod("trainer", {{"gpuslice.io/memory", "2Gi"}}, vgpu);
  const json plain = DpPod("plain", {{"gpuslice.io/cores", "20"}}, {{"cpu", "1"}});
  EXPECT_TRUE(AsksForDevicePlugins(trainer));
  EXPECT_FALSE(AsksForDevicePlugins(plain));
  watch.OnList({trainer, plain});
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].first, "team-a/trainer");
  ASSERT_TRUE(told[0].second);
  EXPECT_EQ(told[0].second->memory_bytes, 2ull << 30);
  ASSERT_EQ(target.calls().size(), 1u);  // the plain pod's group only
  EXPECT_NE(target.calls()[0].find("apply pod-"), std::string::npos);
  EXPECT_NE(target.calls()[0].find("plain"), std::string::npos);

  // A change is sent; the same settings again are not.
  trainer["metadata"]["annotations"]["gpuslice.io/cores"] = "30";
  watch.OnEvent("MODIFIED", trainer);
  watch.OnEvent("MODIFIED", trainer);
  ASSERT_EQ(told.size(), 2u);
  EXPECT_EQ(told[1].second->cores_percent, 30u);
  // A bad value sends nothing.
  json bad = trainer;
  bad["metadata"]["annotations"]["gpuslice.io/cores"] = "lots";
  watch.OnEvent("MODIFIED", bad);
  EXPECT_EQ(told.size(), 2u);
  // Deleted: none any more.
  watch.OnEvent("DELETED", trainer);
  ASSERT_EQ(told.size(), 3u);
  EXPECT_FALSE(told[2].second);
  // Back, then gone from a relist.
  watch.OnList({trainer});
  watch.OnList({});
  ASSERT_EQ(told.size(), 5u);
  EXPECT_TRUE(told[3].second);
  EXPECT_EQ(told[4].first, "team-a/trainer");
  EXPECT_FALSE(told[4].second);
}

class PodWatchTest : public FakeApiTest {
 protected:
  void StartWatch() {
    watch_ = std::make_unique<PodWatch>(
        target_,
        [this](std::string_view type, const json& data) {
          std::lock_guard lock(mu_);
          events_.emplace_back(std::string(type), data);
        },
        KubeEventRecorder(*client_, "gpusliced", "n1"));
    Reflector::Options o;
    o.collection = "/api/v1/pods";
    o.field_selector = "spec.nodeName=n1";
    reflector_ = std::make_unique<Reflector>(*client_, o, *watch_, sleeper_);
    reflector_->Start();
    ASSERT_TRUE(api_->WaitForOpenWatches(1, seconds(10)));
  }
  void TearDown() override {
    if (reflector_) reflector_->Stop();
  }
  std::string GroupOf(const json& created) {
    return "pod-" + created["metadata"]["uid"].get<std::string>();
  }

  RecordingTarget target_;
  RealSleeper sleeper_;
  std::unique_ptr<PodWatch> watch_;
  std::unique_ptr<Reflector> reflector_;
  std::mutex mu_;
  std::vector<std::pair<std::string, json>> events_;
};

TEST_F(PodWatchTest, AnnotationsApplyLiveAndADeletedPodIsDropped) {
  json a =
      api_->Create("/api/v1/namespaces/ns/pods",
                   Pod("a", "n1", {{"gpuslice.io/memory", "4Gi"}, {"gpuslice.io/cores", "30"}}));
  api_->Create("/api/v1/namespaces/ns/pods", Pod("elsewhere", "n2", {{"gpuslice.io/cores", "50"}}));
  api_->Create("/api/v1/namespaces/ns/pods", Pod("plain", "n1", json::object()));
  StartWatch();
  const std::string g = GroupOf(a);
  ASSERT_TRUE(target_.WaitForCalls(1));
  api_->Modify("/api/v1/namespaces/ns/pods/a",
               [](json& p) { p["metadata"]["annotations"]["gpuslice.io/cores"] = "50"; });
  ASSERT_TRUE(target_.WaitForCalls(2));
  // A change elsewhere in the pod (its status) applies nothing new.
  api_->Modify("/api/v1/namespaces/ns/pods/a", [](json& p) { p["status"]["phase"] = "Running"; });
  api_->Remove("/api/v1/namespaces/ns/pods/a");
  ASSERT_TRUE(target_.WaitForCalls(3));
  EXPECT_EQ(target_.calls(),
            (std::vector<std::string>{"apply " + g + " {\"cores\":30,\"memory_bytes\":4294967296}",
                                      "apply " + g + " {\"cores\":50,\"memory_bytes\":4294967296}",
                                      "drop " + g}));
  EXPECT_TRUE(watch_->applied().empty());
}

TEST_F(PodWatchTest, TheFirstListDropsWhatWasRestoredForPodsGoneWhileTheDaemonWasDown) {
  json a =
      api_->Create("/api/v1/namespaces/ns/pods", Pod("a", "n1", {{"gpuslice.io/cores", "30"}}));
  // The daemon's checkpoint had settings for `a` and for a pod deleted since.
  target_.Restored({GroupOf(a), "pod-deleted-while-down"});
  StartWatch();
  ASSERT_TRUE(target_.WaitForCalls(2));
  EXPECT_EQ(target_.calls(), (std::vector<std::string>{"apply " + GroupOf(a) + " {\"cores\":30}",
                                                       "drop pod-deleted-while-down"}));
  std::lock_guard lock(mu_);
  ASSERT_FALSE(events_.empty());
  EXPECT_EQ(events_.back().first, "kube_pod_settings_dropped");
  EXPECT_EQ(events_.back().second["group"], "pod-deleted-while-down");
}

TEST_F(PodWatchTest, ABadValueIsReportedAndKeepsWhatWasApplied) {
  json a =
      api_->Create("/api/v1/namespaces/ns/pods", Pod("a", "n1", {{"gpuslice.io/cores", "30"}}));
  StartWatch();
  const std::string g = GroupOf(a);
  ASSERT_TRUE(target_.WaitForCalls(1));
  api_->Modify("/api/v1/namespaces/ns/pods/a",
               [](json& p) { p["metadata"]["annotations"]["gpuslice.io/cores"] = "lots"; });
  // The Kubernetes Event on the pod is the report's last step.
  ASSERT_TRUE(api_->WaitForRequests(
      [](auto& log) {
        for (auto& r : log) {
          if (r.method == "POST" && r.path == "/api/v1/namespaces/ns/events") return true;
        }
        return false;
      },
      seconds(10)));
  auto k8s_events = api_->List("/api/v1/namespaces/ns/events");
  ASSERT_EQ(k8s_events.size(), 1u);
  EXPECT_EQ(k8s_events[0]["reason"], "InvalidGpusliceAnnotation");
  EXPECT_EQ(k8s_events[0]["type"], "Warning");
  EXPECT_EQ(k8s_events[0]["involvedObject"]["name"], "a");
  EXPECT_NE(k8s_events[0]["message"].get<std::string>().find("gpuslice.io/cores=\"lots\""),
            std::string::npos);
  {
    std::lock_guard lock(mu_);
    bool refused = false;
    for (auto& [type, data] : events_) refused |= type == "kube_pod_settings_refused";
    EXPECT_TRUE(refused);
  }
  EXPECT_EQ(watch_->applied().at(g).cores_percent, 30u);
  api_->Modify("/api/v1/namespaces/ns/pods/a",
               [](json& p) { p["metadata"]["annotations"]["gpuslice.io/cores"] = "40"; });
  ASSERT_TRUE(target_.WaitForCalls(2));
  EXPECT_EQ(target_.calls().back(), "apply " + g + " {\"cores\":40}");
}

TEST_F(PodWatchTest, RemovedAnnotationsAndARelistDropSettings) {
  json a =
      api_->Create("/api/v1/namespaces/ns/pods", Pod("a", "n1", {{"gpuslice.io/cores", "30"}}));
  json b =
      api_->Create("/api/v1/namespaces/ns/pods", Pod("b", "n1", {{"gpuslice.io/cores", "20"}}));
  StartWatch();
  ASSERT_TRUE(target_.WaitForCalls(2));
  api_->Modify("/api/v1/namespaces/ns/pods/a", [](json& p) { p["metadata"].erase("annotations"); });
  ASSERT_TRUE(target_.WaitForCalls(3));
  EXPECT_EQ(target_.calls()[2], "drop " + GroupOf(a));
  // b goes while the watch is down and the history is compacted: the relist drops it.
  api_->DropConnections();
  api_->Remove("/api/v1/namespaces/ns/pods/b");
  api_->Compact();
  ASSERT_TRUE(target_.WaitForCalls(4));
  EXPECT_EQ(target_.calls()[3], "drop " + GroupOf(b));
}

class RegistryTargetTest : public ::testing::Test {
 protected:
  FakeProc proc_;
  SimulatedClock clock_;
  FakeWatcher watcher_;
  TenantRegistry registry_{TenantRegistry::Options{proc_.root()}, clock_, watcher_, nullptr,
                           [](std::string_view, const json&) {}};
  RegistrySettingsTarget target_{registry_};
};

TEST_F(RegistryTargetTest, AppliesAndDropsAGroupsSettings) {
  PodSettings s;
  s.memory_bytes = uint64_t{4} << 30;
  s.cores_percent = 30;
  s.request_percent = 20;
  s.priority = Priority::kLatency;
  ASSERT_TRUE(target_.Apply("pod-x", s).ok());
  auto g = registry_.GroupOf("pod-x");
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(LimitOn(g->limits, "GPU-0"), (GpuLimit{uint64_t{4} << 30, 30u}));
  EXPECT_EQ(ScheduleEntryOn(g->schedule, "GPU-0").request_percent, 20u);
  auto on = registry_.ScheduleOn("pod-x", "GPU-0");
  ASSERT_TRUE(on.has_value());
  ASSERT_TRUE(target_.Drop("pod-x").ok());
  EXPECT_FALSE(registry_.GroupOf("pod-x").has_value());
  EXPECT_TRUE(target_.Drop("pod-x").ok());  // idempotent
}

// The pod's deletion reaches the daemon before it has seen its last
// process exit: the group loses its settings at once and goes with that
// process (it used to stay, without settings, until an admin deleted it).
TEST_F(RegistryTargetTest, ADroppedGroupGoesWithItsLastMember) {
  PodSettings s;
  s.cores_percent = 30;
  ASSERT_TRUE(target_.Apply("pod-x", s).ok());
  proc_.Add(100, "100", 1000, 11, "0::/user.slice/user-1000.slice/session-1.scope\n");
  Registration r;
  r.pid = 100;
  r.uid = 1000;
  r.group = "pod-x";
  r.devices = {"GPU-0"};
  ASSERT_TRUE(registry_.Register(r).ok());
  ASSERT_TRUE(target_.Drop("pod-x").ok());
  ASSERT_TRUE(registry_.GroupOf("pod-x").has_value());
  EXPECT_TRUE(registry_.GroupOf("pod-x")->limits.empty());
  registry_.OnExited({100});
  EXPECT_FALSE(registry_.GroupOf("pod-x").has_value());
}

TEST_F(RegistryTargetTest, PodGroupsAreThoseWithSettings) {
  PodSettings s;
  s.cores_percent = 30;
  ASSERT_TRUE(target_.Apply("pod-x", s).ok());
  ASSERT_TRUE(target_.Apply("claim-y", s).ok());  // not a pod's group
  EXPECT_EQ(target_.PodGroups(), std::vector<std::string>{"pod-x"});
  ASSERT_TRUE(target_.Drop("pod-x").ok());
  EXPECT_TRUE(target_.PodGroups().empty());
}

TEST_F(RegistryTargetTest, AnOvercommitIsRefused) {
  PodSettings s;
  s.request_percent = 70;
  ASSERT_TRUE(target_.Apply("pod-a", s).ok());
  Status st = target_.Apply("pod-b", s);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
}

}  // namespace
}  // namespace gpuslice::daemon::kube
