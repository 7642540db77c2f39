#include "sim/mps/v3_config.h"

#include <gtest/gtest.h>

#include "sim/mps/toml.h"

namespace gpuslice::sim::mps {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

// The documented example's shape (names and values ours).
constexpr char kFull[] = R"(# an MPS v3 configuration
schema_version = "1.0"

[servers.train]
allowed_devices          = "GPU-aaaa,GPU-bbbb"
pinned_memory_limit      = "10G"
active_thread_percentage = "50"
client_priority          = "0"
uid                      = 1000
locality_domains         = false

[servers.train.namespaces.fast]
pinned_memory_limit      = "5G"
active_thread_percentage = "25"   # a quarter

[servers.train.namespaces.default]
client_priority = "1"

[[servers.train.devices]]
uuid = "GPU-aaaa"

  [[servers.train.devices.sm_partitions]]
  name              = "large"
  chunks            = 4
  include_remainder = false

  [[servers.train.devices.sm_partitions]]
  name              = "rest"
  chunks            = 1
  include_remainder = true

[features.memacct]
enabled   = true
audit_log = true

[features.context-share]
enabled        = true
default_socket = "on"
)";

TEST(TomlTest, ParsesTheSubsetTheSchemaUses) {
  auto t = ParseToml(kFull);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->at("schema_version").str(), "1.0");
  const TomlTable& train = t->at("servers").table().at("train").table();
  EXPECT_EQ(train.at("uid").integer(), 1000);
  EXPECT_FALSE(train.at("locality_domains").boolean());
  const TomlTableArray& devices = train.at("devices").table_array();
  ASSERT_EQ(devices.size(), 1u);
  ASSERT_EQ(devices[0].at("sm_partitions").table_array().size(), 2u);
  EXPECT_EQ(devices[0].at("sm_partitions").table_array()[1].at("name").str(), "rest");
}

TEST(TomlTest, RejectsWhatItDoesNotSpeakWithTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"a = 1\na = 2\n", "line 2: key 'a' defined twice"},
      {"[t]\n[t]\n", "line 2: table 't' defined twice"},
      {"a = [1, 2]\n", "line 1: unsupported value"},
      {"a = {b = 1}\n", "line 1: unsupported value"},
      {"a = 1.5\n", "line 1: only decimal integers"},
      {"a = 0x10\n", "line 1: only decimal integers"},
      {"a = \"open\n", "line 1: unterminated string"},
      {"a = \"\\u0041\"\n", "line 1: unsupported escape"},
      {"a.b = 1\n", "line 1: dotted keys"},
      {"a = 1 b\n", "line 1: unexpected"},
      {"[t\n", "line 1: missing ']'"},
      {"a = \"\"\"x\"\"\"\n", "line 1: multi-line"},
      {"x = 99999999999999999999\n", "line 1: integer out of range"},
      {"a = 1\n[a]\n", "line 2: 'a' is already defined"},
      {"= 1\n", "line 1: bad key"},
      {"a = truex\n", "line 1: unsupported value"},
  };
  for (const auto& [text, want] : cases) {
    auto t = ParseToml(text);
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_NE(t.status().message().find(want), std::string::npos)
        << text << " -> " << t.status().message();
  }
}

TEST(V3ConfigTest, ReadsServersNamespacesPartitionsAndFeatures) {
  auto c = ParseV3Config(kFull);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->servers.size(), 1u);
  const V3Server& s = c->servers[0];
  EXPECT_EQ(s.name, "train");
  EXPECT_EQ(s.allowed_devices, (std::vector<std::string>{"GPU-aaaa", "GPU-bbbb"}));
  EXPECT_EQ(s.limits.pinned_bytes, 10 * kGiB);
  EXPECT_EQ(s.limits.thread_percent, 50.0);
  EXPECT_EQ(s.limits.priority, 0u);
  EXPECT_EQ(s.uid, 1000u);
  ASSERT_EQ(s.namespaces.size(), 2u);
  EXPECT_EQ(s.namespaces.at("fast").thread_percent, 25.0);
  EXPECT_EQ(s.namespaces.at("fast").pinned_bytes, 5 * kGiB);
  EXPECT_FALSE(s.namespaces.at("fast").priority);
  EXPECT_EQ(s.namespaces.at("default").priority, 1u);
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_EQ(s.devices[0].uuid, "GPU-aaaa");
  ASSERT_EQ(s.devices[0].sm_partitions.size(), 2u);
  EXPECT_EQ(s.devices[0].sm_partitions[0].chunks, 4u);
  EXPECT_TRUE(s.devices[0].sm_partitions[1].include_remainder);
  EXPECT_TRUE(c->memacct);
  EXPECT_TRUE(c->context_share);
  EXPECT_EQ(c->context_share_default_socket, "on");
}

TEST(V3ConfigTest, UnknownKeysAndBadValuesAreErrors) {
  const std::string head = "schema_version = \"1.0\"\n";
  const std::pair<std::string, const char*> cases[] = {
      {"", "schema_version is missing"},
      {"schema_version = \"2.0\"\n", "is not 1.0"},
      {head + "colour = \"red\"\n", "unknown key 'colour'"},
      {head + "[servers.a]\nmax_clients = 4\n", "servers.a: unknown key 'max_clients'"},
      {head + "[servers.a.namespaces.n]\nuid = 4\n", "servers.a.namespaces.n: unknown key 'uid'"},
      {head + "[servers.a]\nactive_thread_percentage = 50\n", "expected a string"},
      {head + "[servers.a]\nactive_thread_percentage = \"150\"\n", "not a number in (0, 100]"},
      {head + "[servers.a]\npinned_memory_limit = \"lots\"\n", "not a limit"},
      {head + "[servers.a]\nclient_priority = \"2\"\n", "is not 0 or 1"},
      {head + "[servers.a]\nuid = -1\n", "expected a user id"},
      {head + "[servers.a]\nlocality_domains = \"yes\"\n", "expected true or false"},
      {head + "[servers.a]\nallowed_devices = \"0,1\"\n", "is not a GPU UUID"},
      {head + "[servers.\"a/b\"]\n", "bad name"},
      {head + "[[servers.a.devices]]\nuuid = \"GPU-x\"\n[[servers.a.devices.sm_partitions]]\n"
              "name = \"p\"\nchunks = 0\n",
       "expected an integer in [1, 1024]"},
      {head + "[[servers.a.devices]]\nuuid = \"GPU-x\"\n[[servers.a.devices.sm_partitions]]\n"
              "name = \"p\"\nchunks = 1\nsize = 3\n",
       "unknown key 'size'"},
      {head + "[[servers.a.devices]]\nname = \"x\"\n", "unknown key 'name'"},
      {head + "[features.memacct]\nenabled = 1\n", "expected true or false"},
      {head + "[features.gang]\n", "unknown key 'gang'"},
      {head + "[features.context-share]\ndefault_socket = \"maybe\"\n", "expected on or off"},
  };
  for (const auto& [text, want] : cases) {
    auto c = ParseV3Config(text);
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.status().message().find(want), std::string::npos)
        << text << " -> " << c.status().message();
  }
}

}  // namespace
}  // namespace gpuslice::sim::mps
