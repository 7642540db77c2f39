#include "sim/mps/command.h"

#include <gtest/gtest.h>

namespace gpuslice::sim::mps {
namespace {

TEST(ParseCommandTest, ParsesEveryCommand) {
  struct Case {
    const char* line;
    CommandKind kind;
  } cases[] = {
      {"get_server_list", CommandKind::kGetServerList},
      {"get_server_status 12", CommandKind::kGetServerStatus},
      {"start_server -uid 1000", CommandKind::kStartServer},
      {"get_client_list 12", CommandKind::kGetClientList},
      {"get_device_client_list", CommandKind::kGetDeviceClientList},
      {"get_device_client_list 12", CommandKind::kGetDeviceClientList},
      {"set_default_active_thread_percentage 33.5", CommandKind::kSetDefaultThreadPercent},
      {"get_default_active_thread_percentage", CommandKind::kGetDefaultThreadPercent},
      {"set_active_thread_percentage 12 50", CommandKind::kSetThreadPercent},
      {"get_active_thread_percentage 12", CommandKind::kGetThreadPercent},
      {"set_default_device_pinned_mem_limit 0 10G", CommandKind::kSetDefaultPinnedLimit},
      {"get_default_device_pinned_mem_limit 0", CommandKind::kGetDefaultPinnedLimit},
      {"set_device_pinned_mem_limit 12 1 900M", CommandKind::kSetPinnedLimit},
      {"get_device_pinned_mem_limit 12 1", CommandKind::kGetPinnedLimit},
      {"terminate_client 12 34", CommandKind::kTerminateClient},
      {"ps", CommandKind::kPs},
      {"ps -p 34", CommandKind::kPs},
      {"set_default_client_priority 1", CommandKind::kSetDefaultClientPriority},
      {"get_default_client_priority", CommandKind::kGetDefaultClientPriority},
      {"  quit  ", CommandKind::kQuit},
      {"__client_connect 34 1000 0 - - 0", CommandKind::kClientConnect},
  };
  for (const Case& c : cases) {
    auto parsed = ParseCommand(c.line);
    ASSERT_TRUE(parsed.ok()) << c.line << ": " << parsed.status().message();
    EXPECT_EQ(parsed->kind, c.kind) << c.line;
  }
}

TEST(ParseCommandTest, ExtractsArguments) {
  auto c = ParseCommand("set_device_pinned_mem_limit 12 1 900M");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->pid, 12);
  EXPECT_EQ(c->device, 1);
  EXPECT_EQ(c->bytes, 900ull << 20);
  c = ParseCommand("terminate_client 12 34");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->pid, 12);
  EXPECT_EQ(c->client_pid, 34);
  c = ParseCommand("start_server -uid 1000");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->uid, 1000u);
  c = ParseCommand("set_active_thread_percentage 7 33.5");
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->percent, 33.5);
  c = ParseCommand("ps -p 34");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->pid, 34);
  c = ParseCommand("__client_connect 34 1000 1 30.0 1073741824 1");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->device, 1);
  EXPECT_DOUBLE_EQ(c->percent, 30.0);
  EXPECT_EQ(c->bytes, 1ull << 30);
  EXPECT_EQ(c->priority, 1u);
}

TEST(ParseCommandTest, RejectsBadInputWithAMessage) {
  const char* bad[] = {
      "",
      "frobnicate",
      "get_server_status",
      "get_server_status abc",
      "get_server_status -5",
      "get_server_list extra",
      "start_server 1000",
      "start_server -uid x",
      "set_default_active_thread_percentage 0",
      "set_default_active_thread_percentage 101",
      "set_default_active_thread_percentage fifty",
      "set_default_device_pinned_mem_limit 0 10",
      "set_default_device_pinned_mem_limit 0 10T",
      "set_default_device_pinned_mem_limit x 10G",
      "set_device_pinned_mem_limit 12 0",
      "terminate_client 12",
      "ps -q 3",
      "ps 3",
      "set_default_client_priority 2",
      "__client_connect 34 1000 0 - - 5",
  };
  for (const char* line : bad) {
    auto parsed = ParseCommand(line);
    EXPECT_FALSE(parsed.ok()) << line;
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
      EXPECT_TRUE(parsed.status().message().starts_with("Error: ")) << parsed.status().message();
    }
  }
}

TEST(PinnedLimitTest, ParsesAndFormatsAsMpsDoes) {
  EXPECT_EQ(*ParsePinnedLimit("10G"), 10ull << 30);
  EXPECT_EQ(*ParsePinnedLimit("900m"), 900ull << 20);
  EXPECT_EQ(*ParsePinnedLimit("0"), 0u);
  EXPECT_FALSE(ParsePinnedLimit("1.5G").ok());
  EXPECT_FALSE(ParsePinnedLimit("G").ok());
  EXPECT_EQ(FormatPinnedLimit(10ull << 30), "10G");
  EXPECT_EQ(FormatPinnedLimit(900ull << 20), "900M");
  EXPECT_EQ(FormatPinnedLimit(0), "0");
  EXPECT_EQ(FormatPercent(100), "100.0");
  EXPECT_EQ(FormatPercent(33.5), "33.5");
}

}  // namespace
}  // namespace gpuslice::sim::mps
