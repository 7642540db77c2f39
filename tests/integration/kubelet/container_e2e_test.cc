// Real containers read gpusliced's CDI specs (docs/kubelet.md "CDI specs"):
// Debian's podman, with crun, runs `--device gpuslice.io/claim=<uid>` from
// the spec the daemon wrote for a DRA claim the fake kubelet prepared, in a
// root filesystem made from the machine's own /usr (no image registry), on
// the simulated GPU. A container gets the spec's environment, mounts and the
// limiter; its program is held to the claim's memory and compute; two containers are two
// tenants, each in its own PID namespace and cgroup, listed with their
// container ids; on MPS v3 a container sees its own group's MPS pipe
// directory and no other group's; and a device plugin slice's container,
// made from the Allocate answer and the MPS device it names, is its group's
// MPS tenant.
//
// Needs root and podman (scripts/setup installs it and prepares the
// machine's cgroups for crun); skipped without them. Podman 4.3 reads CDI
// specs only from /etc/cdi and /var/run/cdi, so the daemon writes there,
// with claim UIDs of this run's own.
#include "sim/core/node_helper.h"
#include "tests/integration/kubelet/kubelet_e2e_fixture.h"

namespace gpuslice {
namespace {

using namespace kubelet_e2e;  // NOLINT(google-build-using-namespace): the fixture and its constants

// An r615 node with one GPU: the simulated control binary speaks MPS v3.
constexpr char kR615OneGpu[] = R"({"device_count":1,"driver_version":"615.10"})";

class ContainerE2eTest : public KubeletE2eTest {
 protected:
  static constexpr int kHelperOutput = 99;  // the node helper's output files (the daemon's are 0)

  void SetUp() override {
    KubeletE2eTest::SetUp();
    if (geteuid() != 0) GTEST_SKIP() << "needs root (podman as root, /var/run/cdi)";
    if (testing::CommandOutput("command -v podman").empty()) {
      GTEST_SKIP() << "podman is not installed (scripts/setup installs it)";
    }
    // The simulator's state and node socket in a directory of their own,
    // mounted into the containers, as a node's driver is there for each.
    std::filesystem::create_directories(dir_ + "/sim");
    state_ = dir_ + "/sim/sim.state";
    cdi_dir_ = "/var/run/cdi";
    for (const char* name : {"a", "b"}) {
      uids_.push_back("c0c0c0c0-0000-4000-8000-" + Hex12(getpid()) + name);
    }
    // The simulator's node helper, outside every container, as a node's
    // kernel module is: it tells a containerised process its host pid, so
    // the simulated NVML names it as the real one does (docs/sim.md).
    const std::string helper = state_ + ".node";
    StartProgram(BuildDir() + "/sim/bin/gpuslice-sim-node", kHelperOutput, {"--socket", helper});
    ASSERT_TRUE(WaitFor([&] { return sim::AskNodeHelper(helper, 100).ok(); }, 10s))
        << Read("err" + std::to_string(kHelperOutput));
    WriteContainersConf();
    MakeRootfs();
    // Podman must be able to run a container here: if it cannot, the
    // command and its error say why.
    const auto [code, out] = Podman({"run", "--rm", "--network", "none", "-v", "/usr:/usr:ro",
                                     "--rootfs", dir_ + "/rootfs", "/usr/bin/true"});
    ASSERT_EQ(code, 0) << "podman cannot run a container on this machine: " << out;
  }
  void TearDown() override {
    for (const std::string& name : containers_) Podman({"rm", "--force", "--time", "0", name});
    for (const std::string& uid : uids_) std::filesystem::remove(SpecPath(uid));
    for (const std::string& spec : specs_) std::filesystem::remove(spec);
    KubeletE2eTest::TearDown();
  }

  // A UID's last 12 hex digits, one short (the claim's letter is the last).
  static std::string Hex12(uint64_t v) {
    char buf[16];
    snprintf(buf, sizeof buf, "%011llx", static_cast<unsigned long long>(v & 0xfffffffffffULL));
    return buf;
  }

  // Root's defaults want more open files and processes than this machine's
  // hard limits (crun: "setrlimit RLIMIT_NOFILE: Operation not permitted"),
  // and crun cannot raise a hard limit: the containers get modest limits,
  // which lowering always allows. cgroupfs: no systemd here.
  void WriteContainersConf() {
    std::ofstream(dir_ + "/containers.conf")
        << "[containers]\ndefault_ulimits = [\"nofile=4096:4096\", \"nproc=4096:4096\"]\n"
        << "[engine]\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n";
  }
  // A root filesystem from the machine's own: /usr (mounted read-only by
  // each container) and the merged-/usr links to it.
  void MakeRootfs() {
    const std::string root = dir_ + "/rootfs";
    for (const char* d : {"usr", "etc", "proc", "dev", "sys", "tmp", "run", "var"}) {
      std::filesystem::create_directories(root + "/" + d);
    }
    for (const char* d : {"bin", "lib", "lib64", "sbin"}) {
      std::filesystem::create_symlink(std::string("usr/") + d, root + "/" + d);
    }
  }

  // Runs podman with `args`; its exit code and its output (stdout, then stderr).
  std::pair<int, std::string> Podman(const std::vector<std::string>& args) {
    const int n = next_++;
    std::vector<std::string> argv = {"/usr/bin/podman"};
    argv.insert(argv.end(), args.begin(), args.end());
    const pid_t pid = Spawn(n, argv,
                            {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
                             "CONTAINERS_CONF=" + dir_ + "/containers.conf"});
    const int code = Join(pid);
    return {code, Read("out" + std::to_string(n)) + Read("err" + std::to_string(n))};
  }
  // `podman run` arguments for a container named `name` with the CDI
  // device `device`, the simulated driver (its libraries and state) and this
  // build's programs, and the options `extra`, running `command`.
  std::vector<std::string> RunArgs(const std::string& name, const std::string& device,
                                   const std::vector<std::string>& command,
                                   const std::string& sim_config,
                                   const std::vector<std::string>& extra = {}) {
    containers_.push_back(name);
    std::vector<std::string> args = {"run",
                                     "--name",
                                     name,
                                     "--network",
                                     "none",
                                     "--device",
                                     device,
                                     "-v",
                                     "/usr:/usr:ro",
                                     "-v",
                                     BuildDir() + ":" + BuildDir() + ":ro",
                                     "-v",
                                     dir_ + "/sim:" + dir_ + "/sim",
                                     "-e",
                                     "LD_LIBRARY_PATH=" + BuildDir() + "/sim/lib",
                                     "-e",
                                     "GPUSLICE_SIM_STATE=" + state_,
                                     "-e",
                                     "GPUSLICE_SIM_CONFIG=" + sim_config,
                                     "-e",
                                     "GPUSLICE_LOG_LEVEL=info"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--rootfs", dir_ + "/rootfs"});
    args.insert(args.end(), command.begin(), command.end());
    return args;
  }

  std::string ClaimDevice(size_t i) const { return daemon::kubelet::CdiDeviceId(uids_[i]); }

  // Prepares claim `name` (`uids_[i]`) for 4 GiB and 30 % of gpu-0, with
  // `config` as its opaque parameters when not null.
  void PrepareClaim(const std::string& endpoint, size_t i, const json& config = nullptr) {
    const std::string name = std::string("slice-") + static_cast<char>('a' + i);
    json claim = ClaimObject("gpu-0", name, uids_[i]);
    if (!config.is_null()) {
      claim["status"]["allocation"]["devices"]["config"] =
          json::array({{{"source", "FromClaim"},
                        {"requests", json::array({"gpu"})},
                        {"opaque", {{"driver", "gpuslice.io"}, {"parameters", config}}}}});
    }
    std::filesystem::create_directories(dir_ + "/claims/team-a");
    std::ofstream(dir_ + "/claims/team-a/" + name + ".json") << claim.dump();
    auto prepared = kubelet_.Prepare(endpoint, {Claim(name, uids_[i])});
    ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
    ASSERT_EQ(prepared->claims().at(uids_[i]).error(), "") << Read("err0");
  }

  // The daemon's tenant whose group is `group`, once it has one.
  json TenantOf(const std::string& group) {
    json found;
    WaitFor(
        [&] {
          for (const json& t : Get("/v1/tenants").value("tenants", json::array())) {
            if (t.value("group", "") == group) found = t;
          }
          return !found.is_null();
        },
        20s);
    return found;
  }

  std::vector<std::string> uids_;        // this run's claims
  std::vector<std::string> containers_;  // names, removed at the end
  std::vector<std::string> specs_;       // other specs of this run's, removed at the end
};

TEST_F(ContainerE2eTest, APodmanContainerWithAClaimsDeviceIsHeldToTheClaim) {
  StartDaemon({"--dra"}, /*claims_dir=*/true, kOneGpu);
  const std::string endpoint = RegisterPlugin();
  ASSERT_FALSE(endpoint.empty());
  PrepareClaim(endpoint, 0);
  PrepareClaim(endpoint, 1);
  const json spec = Spec(uids_[0]);
  ASSERT_FALSE(spec.is_discarded()) << SpecPath(uids_[0]);
  const std::string tag = std::to_string(getpid());

  // The spec's environment, as podman applied it.
  const auto [env_code, env_out] =
      Podman(RunArgs("gs-env-" + tag, ClaimDevice(0), {"/usr/bin/env"}, kOneGpu));
  ASSERT_EQ(env_code, 0) << env_out;
  for (const auto& [name, value] : daemon::kubelet::CdiEnv(spec)) {
    EXPECT_NE(env_out.find(name + "=" + value + "\n"), std::string::npos)
        << name << " is not " << value << " in the container:\n"
        << env_out;
  }
  EXPECT_NE(env_out.find("GPUSLICE_GROUP=" + uids_[0] + "\n"), std::string::npos) << env_out;

  // Its program sees a 4 GiB device and cannot allocate past it.
  const auto [info_code, info_out] =
      Podman(RunArgs("gs-info-" + tag, ClaimDevice(0),
                     {BuildDir() + "/bin/gpuslice-alloc-probe", "info"}, kOneGpu));
  ASSERT_EQ(info_code, 0) << info_out;
  const json info = json::parse(info_out.substr(0, info_out.find('\n')), nullptr, false);
  EXPECT_EQ(info.value("total", uint64_t{0}), 4 * kGiB) << info_out;
  const auto [alloc_code, alloc_out] =
      Podman(RunArgs("gs-alloc-" + tag, ClaimDevice(0),
                     {BuildDir() + "/bin/gpuslice-alloc-probe", "alloc", "--api", "alloc",
                      "--chunk", std::to_string(256 << 20)},
                     kOneGpu));
  ASSERT_EQ(alloc_code, 0) << alloc_out;
  const json alloc = json::parse(alloc_out.substr(0, alloc_out.find('\n')), nullptr, false);
  EXPECT_LE(alloc.value("granted_bytes", ~uint64_t{0}), 4 * kGiB) << alloc_out;
  EXPECT_GE(alloc.value("granted_bytes", uint64_t{0}), 4 * kGiB - (512ull << 20))
      << alloc_out << Get(std::string("/v1/groups/") + uids_[0]).dump();
  EXPECT_EQ(alloc.value("error", ""), "CUDA_ERROR_OUT_OF_MEMORY") << alloc_out;

  // Two containers at once, one per claim, holding memory: two tenants of
  // the daemon's, each its claim's group, with its container's id, cgroup
  // and PID namespace.
  std::vector<std::string> ids;
  for (size_t i = 0; i < 2; ++i) {
    std::vector<std::string> args =
        RunArgs("gs-hold-" + tag + static_cast<char>('a' + i), ClaimDevice(i),
                {BuildDir() + "/bin/gpuslice-alloc-probe", "alloc", "--api", "alloc", "--chunk",
                 std::to_string(64 << 20), "--max", "2", "--hold-s", "60"},
                kOneGpu, {"--detach"});
    const auto [code, out] = Podman(args);
    ASSERT_EQ(code, 0) << out;
    ids.push_back(out.substr(0, out.find('\n')));
    ASSERT_EQ(ids.back().size(), 64u) << out;
  }
  std::vector<json> tenants;
  for (size_t i = 0; i < 2; ++i) {
    tenants.push_back(TenantOf(uids_[i]));
    const json& t = tenants.back();
    ASSERT_FALSE(t.is_null()) << Get("/v1/tenants").dump() << "\n"
                              << Podman({"logs", ids[i]}).second << "\n"
                              << Podman({"ps", "-a"}).second << "\ndaemon:\n"
                              << Read("err0");
    EXPECT_EQ(t.value("container_id", ""), ids[i]) << t.dump();
    EXPECT_EQ(t.value("runtime", ""), "podman") << t.dump();
    EXPECT_NE(t.value("cgroup", "").find(ids[i]), std::string::npos) << t.dump();
    // PID 1 of its own namespace (podman runs the command as the
    // container's init), another pid on the host.
    EXPECT_EQ(t.value("container_pid", 0), 1) << t.dump();
    EXPECT_NE(t.value("host_pid", 0), 1) << t.dump();
  }
  EXPECT_NE(tenants[0].value("host_pid", 0), tenants[1].value("host_pid", 0));
  EXPECT_NE(tenants[0].value("cgroup", ""), tenants[1].value("cgroup", ""));
}

// The claim's compute: a saturating CUDA program in the claim's container
// runs at the claim's 30 % of the GPU, by the simulator's ground truth (its
// device time over the simulated clock, named by its host pid as NVIDIA's
// driver names a containerised process).
TEST_F(ContainerE2eTest, APodmanContainersProgramIsHeldToTheClaimsCompute) {
  StartDaemon({"--dra"}, /*claims_dir=*/true, kOneGpu);
  const std::string endpoint = RegisterPlugin();
  ASSERT_FALSE(endpoint.empty());
  PrepareClaim(endpoint, 0);
  const auto [code, out] = Podman(RunArgs("gs-compute-" + std::to_string(getpid()), ClaimDevice(0),
                                          {BuildDir() + "/bin/gpuslice-workload", "--kernel-us",
                                           "2000", "--duration-s", "30", "--quiet"},
                                          kOneGpu, {"--detach"}));
  ASSERT_EQ(code, 0) << out;
  const std::string id = out.substr(0, out.find('\n'));
  const json tenant = TenantOf(uids_[0]);
  ASSERT_FALSE(tenant.is_null()) << Get("/v1/tenants").dump() << Podman({"logs", id}).second
                                 << Read("err0");
  const pid_t host_pid = tenant.value("host_pid", 0);
  ASSERT_TRUE(WaitFor(
      [&] {
        const json p = Process(Stats(), host_pid);
        return !p.empty() && p["devices"][0].value("kernels", uint64_t{0}) > 0;
      },
      20s))
      << Stats().dump() << Podman({"logs", id}).second;
  std::this_thread::sleep_for(1500ms);  // past the limiter's bootstrap
  const double share = ShareOfDevice({host_pid}, 3000ms);
  EXPECT_GE(share, 20) << Podman({"logs", id}).second;
  EXPECT_LE(share, 40) << Podman({"logs", id}).second;
  RecordProperty("container_share_percent", std::to_string(share));
}

TEST_F(ContainerE2eTest, AContainerSeesItsOwnGroupsMpsPipeDirectoryAndNoOtherGroups) {
  std::vector<std::string> args = {"--dra"};
  const std::vector<std::string> mps = MpsArgs();
  ASSERT_FALSE(mps.empty());
  args.insert(args.end(), mps.begin(), mps.end());
  StartDaemon(args, /*claims_dir=*/true, kR615OneGpu);
  const std::string endpoint = RegisterPlugin();
  ASSERT_FALSE(endpoint.empty());
  const json mps_tier = {
      {"apiVersion", "gpuslice.io/v1alpha1"}, {"kind", "SliceConfig"}, {"tier", "mps"}};
  PrepareClaim(endpoint, 0, mps_tier);
  PrepareClaim(endpoint, 1, mps_tier);
  std::vector<std::string> pipes;
  for (const std::string& uid : uids_) {
    const auto env = daemon::kubelet::CdiEnv(Spec(uid));
    ASSERT_TRUE(env.contains("CUDA_MPS_PIPE_DIRECTORY")) << Spec(uid).dump() << Read("err0");
    pipes.push_back(env.at("CUDA_MPS_PIPE_DIRECTORY"));
    EXPECT_TRUE(std::filesystem::is_directory(pipes.back())) << pipes.back();
  }
  ASSERT_NE(pipes[0], pipes[1]) << "MPS v3 gives each group's tenant its own pipe directory";

  // In claim a's container: its own pipe directory is there, claim b's is
  // not, nor the MPS root's other directories (the GPU's log directory).
  const std::string log_dir = daemon::mps::MpsGpuDir(mps_root_, GpuUuid(0)) + "/log";
  EXPECT_TRUE(std::filesystem::is_directory(log_dir)) << log_dir;
  const std::string check = "test -d '" + pipes[0] + "' && ! test -e '" + pipes[1] +
                            "' && ! test -e '" + log_dir + "' && echo isolated";
  const auto [code, out] = Podman(RunArgs("gs-mps-" + std::to_string(getpid()), ClaimDevice(0),
                                          {"/bin/sh", "-c", check}, kR615OneGpu));
  EXPECT_EQ(code, 0) << check << "\n" << out;
  EXPECT_NE(out.find("isolated"), std::string::npos) << out;
}

// A device plugin slice's container, as the kubelet has the runtime make it:
// the Allocate answer's environment and mounts, and the CDI device it names
// (gpuslice.io/mps=<group>), which PreStartContainer filled with the group's
// MPS client. Podman reads that spec; the container's program is a tenant of
// the slice's group on the mps tier, with its container id, held to the
// pod's 1 GiB.
TEST_F(ContainerE2eTest, ADevicePluginSlicesContainerGetsItsAnswerAndItsMpsDevice) {
  std::unique_ptr<testing::FakeKubeApi> api;
  std::string uuid;
  AllocatedSlice allocated;
  ASSERT_NO_FATAL_FAILURE(StartMpsPodSlice(api, uuid, allocated));
  specs_.push_back(daemon::kubelet::CdiMpsSpecPath(cdi_dir_, allocated.group));

  std::vector<std::string> extra = {"--detach"};
  for (const auto& [name, value] : allocated.env)
    extra.insert(extra.end(), {"-e", name + "=" + value});
  for (const auto& m : allocated.answer.mounts()) {
    extra.insert(extra.end(),
                 {"-v", m.host_path() + ":" + m.container_path() + (m.read_only() ? ":ro" : "")});
  }
  const auto [code, out] = Podman(RunArgs(
      "gs-slice-" + std::to_string(getpid()), allocated.answer.cdi_devices(0).name(),
      {"/bin/sh", "-c",
       "env; exec " + BuildDir() +
           "/bin/gpuslice-alloc-probe alloc --api alloc --chunk 67108864 --max 32 --hold-s 60"},
      kOneGpu, extra));
  ASSERT_EQ(code, 0) << out;
  const std::string id = out.substr(0, out.find('\n'));
  const json tenant = TenantOf(allocated.group);
  ASSERT_FALSE(tenant.is_null()) << Get("/v1/tenants").dump() << Podman({"logs", id}).second
                                 << Read("err0");
  EXPECT_EQ(tenant.value("container_id", ""), id) << tenant.dump();
  EXPECT_TRUE(
      WaitFor([&] { return TenantOf(allocated.group).value("tier_granted", "") == "mps"; }, 10s))
      << TenantOf(allocated.group).dump();
  // What it saw and got (its output, once it has allocated).
  std::string logs;
  WaitFor(
      [&] {
        logs = Podman({"logs", id}).second;
        return logs.find("\"granted\"") != std::string::npos;
      },
      20s);
  std::ifstream in(specs_.back());
  const json spec = json::parse(in, nullptr, false);
  ASSERT_TRUE(spec.is_object()) << specs_.back();
  for (const auto& [name, value] : daemon::kubelet::CdiEnv(spec)) {
    EXPECT_NE(logs.find(name + "=" + value + "\n"), std::string::npos) << name << "\n" << logs;
  }
  EXPECT_NE(logs.find("GPUSLICE_GROUP=" + allocated.group + "\n"), std::string::npos) << logs;
  const size_t at = logs.find("{\"api\"");
  ASSERT_NE(at, std::string::npos) << logs;
  const json result = json::parse(logs.substr(at, logs.find('\n', at) - at), nullptr, false);
  EXPECT_GT(result.value("granted_bytes", uint64_t{0}), 0u) << logs;
  EXPECT_LE(result.value("granted_bytes", ~uint64_t{0}), kGiB) << logs;
}

}  // namespace
}  // namespace gpuslice
