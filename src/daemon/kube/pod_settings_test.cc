#include "daemon/kube/pod_settings.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon::kube {
namespace {

using nlohmann::json;

json PodWith(json annotations) {
  return {{"metadata",
           {{"name", "p"},
            {"namespace", "ns"},
            {"uid", "AAAAAAAA-1111-2222-3333-444444444444"},
            {"annotations", std::move(annotations)}}}};
}

TEST(PodSettingsTest, ReadsEveryAnnotation) {
  auto s = ParsePodSettings(PodWith({{"gpuslice.io/memory", "4Gi"},
                                     {"gpuslice.io/cores", "30%"},
                                     {"gpuslice.io/request", "20"},
                                     {"gpuslice.io/priority", "latency"},
                                     {"gpuslice.io/tier", "mps"},
                                     {"other.io/x", "ignored"}}));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->memory_bytes, uint64_t{4} << 30);
  EXPECT_EQ(s->cores_percent, 30u);
  EXPECT_EQ(s->request_percent, 20u);
  EXPECT_EQ(s->priority, Priority::kLatency);
  EXPECT_EQ(s->tier, Tier::kMps);
}

TEST(PodSettingsTest, NoAnnotationsIsEmpty) {
  auto s = ParsePodSettings(json{{"metadata", {{"name", "p"}}}});
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->empty());
}

TEST(PodSettingsTest, ABadValueNamesTheAnnotation) {
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"gpuslice.io/memory", "lots"},
                                                        {"gpuslice.io/memory", "0"},
                                                        {"gpuslice.io/cores", "130"},
                                                        {"gpuslice.io/cores", "0"},
                                                        {"gpuslice.io/request", "-1"},
                                                        {"gpuslice.io/priority", "urgent"},
                                                        {"gpuslice.io/tier", "mig"}}) {
    auto s = ParsePodSettings(PodWith({{key, value}}));
    ASSERT_FALSE(s.ok()) << key << "=" << value;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    std::string quoted = key;
    quoted += "=\"";
    quoted += value;
    quoted += "\"";
    EXPECT_NE(s.status().message().find(quoted), std::string::npos) << s.status().message();
  }
  auto above =
      ParsePodSettings(PodWith({{"gpuslice.io/cores", "20"}, {"gpuslice.io/request", "30"}}));
  EXPECT_FALSE(above.ok());
}

TEST(PodSettingsTest, TheGroupIsTheLimitersPodGroup) {
  EXPECT_EQ(PodGroup(PodWith(json::object())), "pod-aaaaaaaa-1111-2222-3333-444444444444");
  json mirror = PodWith({{"kubernetes.io/config.mirror", "0123456789abcdef0123456789ABCDEF"}});
  EXPECT_EQ(PodGroup(mirror), "pod-0123456789abcdef0123456789abcdef");
  EXPECT_EQ(PodGroup(json{{"metadata", {{"name", "no-uid"}}}}), "");
  EXPECT_EQ(PodName(PodWith(json::object())), "ns/p");
}

TEST(PodSettingsTest, TheChangeReplacesLimitsAndScheduleOnEveryGpu) {
  PodSettings s;
  s.memory_bytes = 1 << 20;
  s.request_percent = 10;
  auto change = GroupChangeFor(s);
  ASSERT_TRUE(change.limits.has_value());
  EXPECT_EQ(change.limits->at(kAllGpus), (GpuLimit{uint64_t{1} << 20, std::nullopt}));
  ASSERT_TRUE(change.schedule.has_value());
  EXPECT_EQ(change.schedule->at(kAllGpus).request_percent, 10u);
  EXPECT_FALSE(change.tier.has_value());
  auto none = GroupChangeFor(PodSettings{});
  EXPECT_TRUE(none.limits->empty());
  EXPECT_TRUE(none.schedule->empty());
}

}  // namespace
}  // namespace gpuslice::daemon::kube
