#include "daemon/config.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace gpuslice::daemon {
namespace {

TEST(ConfigTest, AppliesKnownKeysAndRejectsOthers) {
  DaemonConfig c;
  ASSERT_TRUE(ApplyConfigJson({{"socket", "/tmp/x.sock"}, {"poll_interval_ms", 250}}, c).ok());
  EXPECT_EQ(c.socket, "/tmp/x.sock");
  EXPECT_EQ(c.poll_interval_ms, 250);
  Status unknown = ApplyConfigJson({{"sockett", "/x"}}, c);
  EXPECT_NE(unknown.message().find("sockett"), std::string::npos);
  Status type = ApplyConfigJson({{"poll_interval_ms", "fast"}}, c);
  EXPECT_NE(type.message().find("poll_interval_ms"), std::string::npos);
}

TEST(ConfigTest, ValidatesRangesAndFormats) {
  DaemonConfig c;
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.socket_mode = "0999";
  EXPECT_FALSE(ValidateConfig(c).ok());
  c = DaemonConfig{};
  c.listen_tcp = "127.0.0.1:8080";
  EXPECT_NE(ValidateConfig(c).message().find("token-file"), std::string::npos);
  c.token_file = "/etc/tokens";
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.poll_interval_ms = 0;
  EXPECT_NE(ValidateConfig(c).message().find("poll_interval_ms"), std::string::npos);
  c = DaemonConfig{};
  c.log_level = "loud";
  EXPECT_FALSE(ValidateConfig(c).ok());
  c = DaemonConfig{};
  EXPECT_EQ(c.memory_backstop, "report");
  ASSERT_TRUE(ApplyConfigJson({{"memory_backstop", "kill"}}, c).ok());
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.memory_backstop = "stop";
  EXPECT_NE(ValidateConfig(c).message().find("memory_backstop"), std::string::npos);
  c.memory_backstop = "report";
  EXPECT_EQ(c.compute_backstop, "report");
  ASSERT_TRUE(ApplyConfigJson({{"compute_backstop", "throttle"},
                               {"compute_backstop_over_ms", 2000},
                               {"compute_backstop_unregistered_percent", 5}},
                              c)
                  .ok());
  EXPECT_EQ(c.compute_backstop, "throttle");
  EXPECT_EQ(c.compute_backstop_over_ms, 2000);
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.compute_backstop = "kill";
  EXPECT_NE(ValidateConfig(c).message().find("compute_backstop"), std::string::npos);
  c.compute_backstop = "report";
  c.compute_backstop_unregistered_percent = 0;
  EXPECT_NE(ValidateConfig(c).message().find("compute_backstop_unregistered_percent"),
            std::string::npos);
}

TEST(ConfigTest, KubernetesKeys) {
  DaemonConfig c;
  ASSERT_TRUE(ApplyConfigJson({{"kube_node", "node-1"},
                               {"kube_api", "https://10.0.0.1:6443"},
                               {"kube_ca", "/ca.crt"},
                               {"kube_token_file", "/token"},
                               {"kube_resource_slices", "off"}},
                              c)
                  .ok());
  EXPECT_EQ(c.kube_node, "node-1");
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.kube_api = "10.0.0.1:6443";
  EXPECT_NE(ValidateConfig(c).message().find("kube_api"), std::string::npos);
  c.kube_api = "in-cluster";
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.kube_resource_slices = "maybe";
  EXPECT_NE(ValidateConfig(c).message().find("kube_resource_slices"), std::string::npos);
}

TEST(ConfigTest, KubeletKeys) {
  DaemonConfig c;
  ASSERT_TRUE(ApplyConfigJson({{"dra", true},
                               {"device_plugin", true},
                               {"kubelet_dir", "/k"},
                               {"cdi_dir", "/cdi"},
                               {"dra_claims_dir", "/claims"},
                               {"limiter_library", "/lib/libgpuslice.so"},
                               {"ld_so_preload", "/etc/gs.preload"},
                               {"vgpu_per_gpu", 4},
                               {"gpu_memory_unit_mib", 256}},
                              c)
                  .ok());
  EXPECT_TRUE(c.dra);
  EXPECT_TRUE(c.device_plugin);
  EXPECT_EQ(c.kubelet_dir, "/k");
  EXPECT_EQ(c.cdi_dir, "/cdi");
  EXPECT_EQ(c.dra_claims_dir, "/claims");
  EXPECT_EQ(c.limiter_library, "/lib/libgpuslice.so");
  EXPECT_EQ(c.ld_so_preload, "/etc/gs.preload");
  EXPECT_EQ(c.vgpu_per_gpu, 4);
  EXPECT_EQ(c.gpu_memory_unit_mib, 256);
  EXPECT_TRUE(ValidateConfig(c).ok());
  EXPECT_NE(ApplyConfigJson({{"dra", "yes"}}, c).message().find("boolean"), std::string::npos);
  c.vgpu_per_gpu = 0;
  EXPECT_NE(ValidateConfig(c).message().find("vgpu_per_gpu"), std::string::npos);
}

// Every container of a claim or a slice mounts the socket's directory: with
// the kubelet side on, nothing else of the node's may be in it.
TEST(ConfigTest, TheSocketsDirectoryHoldsNothingContainersMustNotSee) {
  DaemonConfig c;
  EXPECT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c).ToString();  // the defaults
  c.dra = true;
  EXPECT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c).ToString();
  c.socket = "/run/gs/api.sock";
  for (const char* mps_root : {"/run/gs/mps", "/run/gs", "/run/gs/./x/../mps/"}) {
    c.mps_root = mps_root;
    const Status s = ValidateConfig(c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << mps_root;
    EXPECT_NE(s.message().find("mps_root"), std::string::npos) << s.ToString();
  }
  c.mps_root = "/run/gs-mps";  // a sibling, not inside
  EXPECT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c).ToString();
  c.state_dir = "/run/gs/state";
  EXPECT_NE(ValidateConfig(c).message().find("state_dir"), std::string::npos);
  c.dra = false;  // no container mounts it
  EXPECT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c).ToString();
  c.device_plugin = true;
  EXPECT_FALSE(ValidateConfig(c).ok());
}

TEST(ConfigTest, ParsesHostPortModeAndGroups) {
  EXPECT_EQ(ParseHostPort("127.0.0.1:9400")->port, 9400);
  EXPECT_EQ(ParseHostPort("[::1]:80")->host, "::1");
  EXPECT_FALSE(ParseHostPort("localhost").ok());
  EXPECT_FALSE(ParseHostPort("h:70000").ok());
  EXPECT_EQ(*ParseMode("0660"), 0660u);
  EXPECT_FALSE(ParseMode("rw").ok());
  auto lookup = [](const std::string& n) -> std::optional<gid_t> {
    if (n == "gpuadmin") return 77;
    return std::nullopt;
  };
  EXPECT_EQ(*ResolveGroup("gpuadmin", lookup), 77u);
  EXPECT_EQ(*ResolveGroup("12", lookup), 12u);
  EXPECT_FALSE(ResolveGroup("nobody-here", lookup).ok());
}

TEST(ConfigTest, EnvironmentSetsTheKeysThatHaveAVariable) {
  DaemonConfig c;
  const std::map<std::string, std::string> env = {{"GPUSLICE_SOCKET", "/tmp/e.sock"},
                                                  {"GPUSLICE_SHM_DIR", ""},
                                                  {"GPUSLICE_STATE_DIR", "/elsewhere"}};
  ApplyConfigEnv(
      [&env](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      c);
  EXPECT_EQ(c.socket, "/tmp/e.sock");
  EXPECT_EQ(c.shm_dir, kDefaultGroupSegmentDir);  // set but empty: ignored
  EXPECT_EQ(c.state_dir, kDefaultStateDir);       // no such variable
}

TEST(ConfigTest, FlagsGivenWinAndOthersLeaveTheConfigAlone) {
  CLI::App app;
  ConfigFlags flags(app);
  app.parse("--gpu-memory-unit-mib 256 --dra --socket /f.sock --log-level=debug",
            /*program_name_included=*/false);
  DaemonConfig c;
  c.socket = "/file.sock";
  c.cdi_dir = "/file/cdi";
  flags.ApplyGiven(c);
  EXPECT_EQ(c.socket, "/f.sock");
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_EQ(c.gpu_memory_unit_mib, 256);
  EXPECT_TRUE(c.dra);
  EXPECT_FALSE(c.device_plugin);
  EXPECT_EQ(c.cdi_dir, "/file/cdi");
  EXPECT_NE(app.help().find("--compute-backstop-unregistered-percent"), std::string::npos);
  EXPECT_NE(app.help().find("(default: 600)"), std::string::npos);
}

TEST(ConfigTest, EveryKeyIsAFlagAndAJsonKey) {
  // Each row of the docs' table names a key and its flag; both must work.
  std::istringstream table(ConfigDocsTable());
  std::string line;
  int keys = 0;
  while (std::getline(table, line)) {
    if (!line.starts_with("| `")) continue;
    const std::string key = line.substr(3, line.find('`', 3) - 3);
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    EXPECT_NE(line.find("`" + flag), std::string::npos) << line;
    DaemonConfig c;
    const Status unknown = ApplyConfigJson({{key, nullptr}}, c);
    EXPECT_EQ(unknown.message().find("unknown"), std::string::npos) << unknown.ToString();
    CLI::App app;
    ConfigFlags flags(app);
    EXPECT_NE(app.get_option_no_throw(flag), nullptr) << flag;
    ++keys;
  }
  EXPECT_GE(keys, 40);
}

// docs/daemon.md's table of keys, between the two markers, is the one the
// keys give (ConfigDocsTable); on a difference this prints the table to paste.
TEST(ConfigTest, DocsTableMatchesTheKeys) {
  const std::string path = std::string(GPUSLICE_SOURCE_DIR) + "/docs/daemon.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const std::string begin =
      "<!-- config-keys:begin (src/daemon/config_keys.inc; daemon_config_test checks it) -->\n";
  const std::string end = "<!-- config-keys:end -->";
  const size_t from = doc.find(begin);
  const size_t to = doc.find(end);
  ASSERT_NE(from, std::string::npos) << path << " has no line " << begin;
  ASSERT_NE(to, std::string::npos) << path << " has no line " << end;
  ASSERT_LT(from, to);
  const std::string documented = doc.substr(from + begin.size(), to - from - begin.size());
  EXPECT_TRUE(documented == ConfigDocsTable())
      << path << "'s table of keys differs from config_keys.inc; between the markers it "
      << "should read:\n"
      << ConfigDocsTable();
}

}  // namespace
}  // namespace gpuslice::daemon
