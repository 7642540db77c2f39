#include "daemon/tenants/identity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "daemon/tenants/fake_proc.h"

namespace gpuslice::daemon {
namespace {

constexpr const char* kUid = "8d5f2c1e-3b4a-4c6d-9e8f-0a1b2c3d4e5f";
constexpr const char* kUidUnderscores = "8d5f2c1e_3b4a_4c6d_9e8f_0a1b2c3d4e5f";
const std::string kId = "4f3e2d1c0b0a99887766554433221100ffeeddccbbaa00112233445566778899";

TEST(ParseCgroupPathTest, SystemdDriverContainerd) {
  CgroupInfo c = ParseCgroupPath(
      std::string("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod") +
      kUidUnderscores + ".slice/cri-containerd-" + kId + ".scope");
  EXPECT_EQ(c.pod_uid, kUid);
  EXPECT_EQ(c.container_id, kId);
  EXPECT_EQ(c.runtime, "containerd");
  EXPECT_EQ(c.qos, "burstable");
}

TEST(ParseCgroupPathTest, SystemdDriverCrioSkipsConmon) {
  const std::string pod =
      std::string("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod") +
      kUidUnderscores + ".slice/";
  CgroupInfo c = ParseCgroupPath(pod + "crio-" + kId + ".scope");
  EXPECT_EQ(c.pod_uid, kUid);
  EXPECT_EQ(c.container_id, kId);
  EXPECT_EQ(c.runtime, "cri-o");
  EXPECT_EQ(c.qos, "besteffort");
  CgroupInfo conmon = ParseCgroupPath(pod + "crio-conmon-" + kId + ".scope");
  EXPECT_EQ(conmon.pod_uid, kUid);
  EXPECT_EQ(conmon.container_id, "");
}

TEST(ParseCgroupPathTest, SystemdDriverDockerGuaranteed) {
  CgroupInfo c = ParseCgroupPath(std::string("/kubepods.slice/kubepods-pod") + kUidUnderscores +
                                 ".slice/docker-" + kId + ".scope");
  EXPECT_EQ(c.pod_uid, kUid);
  EXPECT_EQ(c.runtime, "docker");
  EXPECT_EQ(c.qos, "guaranteed");
}

TEST(ParseCgroupPathTest, CgroupfsDriver) {
  CgroupInfo c = ParseCgroupPath(std::string("/kubepods/burstable/pod") + kUid + "/" + kId);
  EXPECT_EQ(c.pod_uid, kUid);
  EXPECT_EQ(c.container_id, kId);
  EXPECT_EQ(c.runtime, "");
  EXPECT_EQ(c.qos, "burstable");
  // Upper case in the path is folded.
  CgroupInfo upper = ParseCgroupPath("/kubepods/pod8D5F2C1E-3B4A-4C6D-9E8F-0A1B2C3D4E5F/" + kId);
  EXPECT_EQ(upper.pod_uid, kUid);
  EXPECT_EQ(upper.qos, "guaranteed");
}

TEST(ParseCgroupPathTest, ContainerWithoutPodAndPlainProcesses) {
  CgroupInfo docker = ParseCgroupPath("/system.slice/docker-" + kId + ".scope");
  EXPECT_EQ(docker.pod_uid, "");
  EXPECT_EQ(docker.container_id, kId);
  EXPECT_EQ(docker.runtime, "docker");
  EXPECT_EQ(ParseCgroupPath("/docker/" + kId).runtime, "docker");
  // podman: a systemd scope, or (its cgroupfs manager) libpod-<id> under
  // libpod_parent, as a real podman's containers read /proc/self/cgroup
  // (tests/integration/kubelet: ContainerE2eTest); its monitor is none.
  EXPECT_EQ(ParseCgroupPath("/machine.slice/libpod-" + kId + ".scope").container_id, kId);
  CgroupInfo podman = ParseCgroupPath("/libpod_parent/libpod-" + kId);
  EXPECT_EQ(podman.container_id, kId);
  EXPECT_EQ(podman.runtime, "podman");
  EXPECT_EQ(ParseCgroupPath("/libpod_parent/libpod-conmon-" + kId).container_id, "");
  CgroupInfo plain = ParseCgroupPath("/user.slice/user-1000.slice/session-3.scope");
  EXPECT_EQ(plain, (CgroupInfo{"/user.slice/user-1000.slice/session-3.scope", "", "", "", "", ""}));
  // A host's own cgroup with a hex name is no container: only a runtime's
  // scope, /docker/<id> or a bare id inside a pod is.
  EXPECT_EQ(ParseCgroupPath("/process_api/d9699c6fca09eb8593726271cebfce2f"),
            (CgroupInfo{"/process_api/d9699c6fca09eb8593726271cebfce2f", "", "", "", "", ""}));
  EXPECT_EQ(ParseCgroupPath("/system.slice/" + kId).container_id, "");
  // Look-alikes are not pods: a short "pod" name, a non-hex UID.
  EXPECT_EQ(ParseCgroupPath("/podcast.slice/app.scope").pod_uid, "");
  EXPECT_EQ(ParseCgroupPath("/kubepods/podzzzzzzzz-3b4a-4c6d-9e8f-0a1b2c3d4e5f/x").pod_uid, "");
}

TEST(ParseCgroupFileTest, V2AndV1) {
  const std::string v2 = std::string("0::/kubepods/pod") + kUid + "/" + kId + "\n";
  EXPECT_EQ(ParseCgroupFile(v2).pod_uid, kUid);
  // cgroup v1: the pod is found in a controller's line; name=systemd's is plain.
  const std::string v1 = "12:pids:/kubepods/burstable/pod" + std::string(kUid) + "/" + kId +
                         "\n11:memory:/kubepods/burstable/pod" + kUid + "/" + kId +
                         "\n1:name=systemd:/system.slice/containerd.service\n";
  CgroupInfo c = ParseCgroupFile(v1);
  EXPECT_EQ(c.pod_uid, kUid);
  EXPECT_EQ(c.container_id, kId);
  // Hybrid: an empty unified line does not hide the v1 pod.
  EXPECT_EQ(ParseCgroupFile("0::/\n" + v1).pod_uid, kUid);
  EXPECT_EQ(ParseCgroupFile("0::/user.slice/x.scope\n").path, "/user.slice/x.scope");
  EXPECT_EQ(ParseCgroupFile("garbage"), CgroupInfo{});
  // The v2 path is kept whichever line names the pod or container.
  EXPECT_EQ(ParseCgroupFile("4:memory:/docker/" + std::string(64, 'a') + "\n0::/tenants/a\n")
                .unified_path,
            "/tenants/a");
  EXPECT_EQ(ParseCgroupFile("4:memory:/x\n").unified_path, "");
}

TEST(IdentifyProcessTest, ReadsNamespacePidUidStartTimeCgroupAndEnvironment) {
  FakeProc proc;
  using namespace std::string_literals;
  proc.Add(4242, "4242\t17\t1", 1000, 987654,
           "0::/kubepods/besteffort/pod"s + kUid + "/" + kId + "\n",
           "PATH=/bin\0POD_NAME=web-0\0POD_NAMESPACE=prod\0"s);
  auto id = IdentifyProcess(proc.root(), 4242);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->host_pid, 4242);
  EXPECT_EQ(id->container_pid, 1);
  EXPECT_EQ(id->uid, 1000u);
  EXPECT_EQ(id->start_time, 987654u);
  EXPECT_EQ(id->cgroup.pod_uid, kUid);
  EXPECT_EQ(id->environment.at("POD_NAME"), "web-0");
  EXPECT_EQ(id->environment.count("CONTAINER_NAME"), 0u);
  EXPECT_EQ(ReadStartTime(proc.root(), 4242), 987654u);
  EXPECT_EQ(ReadStartTime(proc.root(), 1), 0u);
  EXPECT_EQ(IdentifyProcess(proc.root(), 4343).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(IdentifyProcess(proc.root(), -1).status().code(), StatusCode::kInvalidArgument);
}

// Found by tests/fuzz/http_request_fuzz (corpus/http_request_fuzz/
// register_hint_conflict): a POD_NAME that is not UTF-8, quoted in a hint
// conflict, made the registry's JSON view throw (the daemon died).
TEST(IdentifyProcessTest, EnvironmentBytesOutsideAsciiAreReplaced) {
  FakeProc proc;
  using namespace std::string_literals;
  proc.Add(4242, "4242", 1000, 987654, "0::/user.slice\n", "POD_NAME=web\xff\xfe-0\0"s);
  auto id = IdentifyProcess(proc.root(), 4242);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->environment.at("POD_NAME"),
            "web?"
            "?-0");
}

TEST(IdentifyProcessTest, TheRealProcIdentifiesThisProcess) {
  auto id = IdentifyProcess("/proc", getpid());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->uid, geteuid());
  EXPECT_GT(id->start_time, 0u);
}

class CheckHintsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    using namespace std::string_literals;
    proc_.Add(10, "10\t1", 0, 5, "0::/kubepods/pod"s + kUid + "/" + kId + "\n",
              "POD_NAME=web-0\0POD_NAMESPACE=prod\0CONTAINER_NAME=app\0"s);
    proc_.Add(11, "11", 1000, 5, "0::/user.slice/user-1000.slice/session-1.scope\n");
    pod_ = *IdentifyProcess(proc_.root(), 10);
    plain_ = *IdentifyProcess(proc_.root(), 11);
  }
  FakeProc proc_;
  ProcessIdentity pod_, plain_;
};

TEST_F(CheckHintsTest, TrueHintsPass) {
  EXPECT_TRUE(CheckHints(pod_, {"web-0", "prod", "app", kUidUnderscores}).empty());
  EXPECT_TRUE(CheckHints(pod_, {}).empty());
  EXPECT_TRUE(CheckHints(plain_, {}).empty());
}

TEST_F(CheckHintsTest, ForgedPodUidIsFlagged) {
  auto c = CheckHints(pod_, {"", "", "", "11111111-2222-3333-4444-555555555555"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NE(c[0].find("pod_uid: claimed"), std::string::npos) << c[0];
  EXPECT_NE(c[0].find(kUid), std::string::npos) << c[0];
}

TEST_F(CheckHintsTest, ForgedPodNameNamespaceAndContainerAreFlagged) {
  auto c = CheckHints(pod_, {"db-0", "kube-system", "sidecar", ""});
  ASSERT_EQ(c.size(), 3u);
  EXPECT_NE(c[0].find("pod_name: claimed \"db-0\""), std::string::npos) << c[0];
  EXPECT_NE(c[0].find("\"web-0\""), std::string::npos) << c[0];
  EXPECT_NE(c[1].find("pod_namespace"), std::string::npos) << c[1];
  EXPECT_NE(c[2].find("container_name"), std::string::npos) << c[2];
}

TEST_F(CheckHintsTest, AProcessInNoPodShowsNoPodOrContainer) {
  using namespace std::string_literals;
  // The cgroup a host's own process may have under cgroup v1 (a hex name).
  proc_.Add(12, "12", 0, 6,
            "4:memory:/process_api/d9699c6fca09eb8593726271cebfce2f\n1:cpu:/\n0::/\n",
            "CONTAINER_NAME=uid-jdbvtt\0"s);
  const ProcessIdentity host = *IdentifyProcess(proc_.root(), 12);
  EXPECT_EQ(host.cgroup.pod_uid, "");
  EXPECT_EQ(host.cgroup.container_id, "");
  const ClaimedHints shown = ShownHints(host, {"web-0", "prod", "uid-jdbvtt", ""});
  EXPECT_EQ(shown.pod_name, "");
  EXPECT_EQ(shown.pod_namespace, "");
  EXPECT_EQ(shown.container_name, "");
  EXPECT_EQ(CheckHints(host, {"", "", "uid-jdbvtt", ""}).size(), 1u);
  EXPECT_EQ(ShownHints(plain_, {"", "", "", kUid}).pod_uid, kUid) << "shown as a claim";
}

TEST_F(CheckHintsTest, APodsTrueHintsAreShownAndContradictedOnesAreNot) {
  const ClaimedHints shown = ShownHints(pod_, {"web-0", "kube-system", "app", ""});
  EXPECT_EQ(shown.pod_name, "web-0");
  EXPECT_EQ(shown.pod_namespace, "") << "the environment says prod";
  EXPECT_EQ(shown.container_name, "app");
}

TEST_F(CheckHintsTest, PodHintsFromAProcessInNoPodAreFlagged) {
  auto c = CheckHints(plain_, {"web-0", "", "", kUid});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_NE(c[0].find("in no pod"), std::string::npos) << c[0];
  EXPECT_NE(c[1].find("pod_name"), std::string::npos) << c[1];
}

}  // namespace
}  // namespace gpuslice::daemon
