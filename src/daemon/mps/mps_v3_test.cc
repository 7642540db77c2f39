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

// SM partitions: the commands parse as the simulated daemon's, its replies
// parse back, and a share of the SMs rounds down to whole chunks.
TEST(MpsV3Test, SmPartitionCommandsRepliesAndSizes) {
  auto create = sim::mps::ParseCommand(V3SmPartitionCommand("create", "GPU-1", "t-1", 4));
  ASSERT_TRUE(create.ok()) << create.status().ToString();
  EXPECT_EQ(create->kind, sim::mps::CommandKind::kV3SmPartitionCreate);
  EXPECT_EQ(create->device_uuid, "GPU-1");
  EXPECT_EQ(create->partition, "t-1");
  EXPECT_EQ(create->chunks, 4u);
  auto del = sim::mps::ParseCommand(V3SmPartitionCommand("delete", "GPU-1", "t-1", 0));
  ASSERT_TRUE(del.ok()) << del.status().ToString();
  EXPECT_EQ(del->kind, sim::mps::CommandKind::kV3SmPartitionDelete);
  EXPECT_TRUE(sim::mps::ParseCommand(V3SmPartitionInfoCommand()).ok());
  EXPECT_TRUE(sim::mps::ParseCommand(V3SmPartitionListCommand()).ok());

  const std::string info = "GPU-0 132 8 16\nGPU-1 114 8 10\n";
  const auto d = ParseV3SmPartitionInfo(info, "GPU-1");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->sms, 114u);
  EXPECT_EQ(d->sms_per_chunk, 8u);
  EXPECT_EQ(d->free_chunks, 10u);
  EXPECT_FALSE(ParseV3SmPartitionInfo(info, "GPU-2").has_value());
  EXPECT_FALSE(ParseV3SmPartitionInfo("GPU-1 114 0 10\n", "GPU-1").has_value());
  EXPECT_EQ(ParseV3SmPartitionSms("GPU-0 a 32\nGPU-1 a 40\n", "GPU-1", "a"), 40u);
  EXPECT_FALSE(ParseV3SmPartitionSms("GPU-0 a 32\n", "GPU-0", "b").has_value());

  const V3DeviceSms h100{132, 8, 16};
  EXPECT_EQ(V3PartitionChunks(h100, 25), 4u);    // 33 SMs -> 32
  EXPECT_EQ(V3PartitionChunks(h100, 50), 8u);    // 66 -> 64
  EXPECT_EQ(V3PartitionChunks(h100, 100), 16u);  // 132 -> 128
  EXPECT_EQ(V3PartitionChunks(h100, 1), 1u);     // never none
}

}  // namespace
}  // namespace gpuslice::daemon::mps
