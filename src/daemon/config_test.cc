#include "daemon/config.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace gpuslice::daemon
