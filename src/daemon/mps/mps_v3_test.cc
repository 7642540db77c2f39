#include "daemon/mps/mps_v3.h"

#include <gtest/gtest.h>

#include "daemon/mps/mps_manager.h"
#include "sim/mps/command.h"
#include "sim/mps/v3_config.h"

namespace gpuslice::daemon::mps {
namespace {

// The simulated control daemon's reader (the documented schema) accepts what
// the manager writes, with the same values.
TEST(MpsV3Test, TheConfigurationFollowsTheDocumentedSchema) {
  TenantSettings a;
  a.active_thread_percentage = 30;
  a.pinned_memory_limit = uint64_t{3} << 30;
  TenantSettings b;
  b.pinned_memory_limit = uint64_t{512} << 20;
  b.client_priority = 1;
  const std::string text = V3Config("GPU-1234", {{"team.a", a}, {"b", b}, {"c", {}}});
  auto config = sim::mps::ParseV3Config(text);
  ASSERT_TRUE(config.ok()) << config.status().ToString() << "\n" << text;
  ASSERT_EQ(config->servers.size(), 1u);
  const auto& server = config->servers[0];
  EXPECT_EQ(server.name, kV3Server);
  EXPECT_EQ(server.allowed_devices, std::vector<std::string>{"GPU-1234"});
  ASSERT_EQ(server.namespaces.size(), 3u);
  EXPECT_EQ(server.namespaces.at("team.a").thread_percent, 30.0);
  EXPECT_EQ(server.namespaces.at("team.a").pinned_bytes, uint64_t{3} << 30);
  EXPECT_EQ(server.namespaces.at("b").pinned_bytes, uint64_t{512} << 20);
  EXPECT_EQ(server.namespaces.at("b").priority, 1u);
  EXPECT_FALSE(server.namespaces.at("c").thread_percent);
}

TEST(MpsV3Test, NamespaceCommandsParse) {
  TenantSettings s;
  s.active_thread_percentage = 25;
  s.pinned_memory_limit = uint64_t{1} << 30;
  const std::string create = V3NamespaceCommand("create", "t-1", &s);
  EXPECT_EQ(create,
            "namespace create --server=gpuslice --name=t-1 --active-thread-percentage=25 "
            "--pinned-memory-limit=1G");
  auto c = sim::mps::ParseCommand(create);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->ns, "t-1");
  EXPECT_EQ(c->ns_percent, 25.0);
  auto d = sim::mps::ParseCommand(V3NamespaceCommand("delete", "t-1", nullptr));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->kind, sim::mps::CommandKind::kV3NamespaceDelete);
  EXPECT_EQ(V3TenantPipeDir("/r/GPU-1/pipe", "t-1"), "/r/GPU-1/pipe/gpuslice/t-1");
}

}  // namespace
}  // namespace gpuslice::daemon::mps
