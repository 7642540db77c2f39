#include "daemon/kube/reflector.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "daemon/kube/kube_test_util.h"

namespace gpuslice::daemon::kube {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Records what it gets; WaitFor waits on a condition with a deadline.
class RecordingHandler final : public ReflectorHandler {
 public:
  void OnList(const std::vector<json>& items) override {
    std::lock_guard lock(mu_);
    names_.clear();
    for (const json& i : items) names_.insert(i["metadata"]["name"].get<std::string>());
    log_.push_back("LIST " + std::to_string(items.size()));
    cv_.notify_all();
  }
  void OnEvent(std::string_view type, const json& o) override {
    std::lock_guard lock(mu_);
    std::string name = o["metadata"]["name"];
    if (type == "DELETED") {
      names_.erase(name);
    } else {
      names_.insert(name);
    }
    log_.push_back(std::string(type) + " " + name);
    cv_.notify_all();
  }
  bool WaitFor(const std::function<bool(const std::vector<std::string>&,
                                        const std::set<std::string>&)>& pred) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, seconds(10), [&] { return pred(log_, names_); });
  }
  std::vector<std::string> log() {
    std::lock_guard lock(mu_);
    return log_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> log_;
  std::set<std::string> names_;
};

// Returns at once, recording the waits asked for.
class RecordingSleeper final : public Sleeper {
 public:
  bool SleepFor(std::chrono::nanoseconds d) override {
    std::lock_guard lock(mu_);
    sleeps_.push_back(std::chrono::duration_cast<milliseconds>(d));
    return !woken_;
  }
  void Wake() override {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  std::vector<milliseconds> sleeps() {
    std::lock_guard lock(mu_);
    return sleeps_;
  }

 private:
  std::mutex mu_;
  std::vector<milliseconds> sleeps_;
  bool woken_ = false;
};

json Pod(const std::string& name, const std::string& node) {
  return {{"metadata", {{"name", name}}}, {"spec", {{"nodeName", node}}}};
}

bool Has(const std::vector<std::string>& log, const std::string& entry) {
  return std::find(log.begin(), log.end(), entry) != log.end();
}

int Count(const std::vector<std::string>& log, const std::string& prefix) {
  return static_cast<int>(
      std::count_if(log.begin(), log.end(), [&](const auto& e) { return e.starts_with(prefix); }));
}

class ReflectorTest : public FakeApiTest {
 protected:
  Reflector::Options NodeOptions() {
    Reflector::Options o;
    o.collection = "/api/v1/pods";
    o.field_selector = "spec.nodeName=n1";
    o.initial_backoff = milliseconds(100);
    o.max_backoff = milliseconds(800);
    return o;
  }
  std::vector<testing::FakeKubeApi::LoggedRequest> Watches() {
    std::vector<testing::FakeKubeApi::LoggedRequest> out;
    for (auto& r : api_->Requests()) {
      if (r.query.contains("watch")) out.push_back(r);
    }
    return out;
  }

  RecordingHandler handler_;
  RecordingSleeper sleeper_;
};

TEST_F(ReflectorTest, ListsThenWatchesTheNodesPods) {
  api_->Create("/api/v1/namespaces/ns/pods", Pod("a", "n1"));
  api_->Create("/api/v1/namespaces/ns/pods", Pod("other", "n2"));
  Reflector r(*client_, NodeOptions(), handler_, sleeper_);
  r.Start();
  ASSERT_TRUE(api_->WaitForOpenWatches(1, seconds(10)));
  EXPECT_EQ(handler_.log(), std::vector<std::string>{"LIST 1"});
  const std::string list_rv = std::to_string(api_->resource_version());

  api_->Create("/api/v1/namespaces/ns/pods", Pod("b", "n1"));
  api_->Create("/api/v1/namespaces/ns/pods", Pod("c", "n2"));
  api_->Modify("/api/v1/namespaces/ns/pods/a",
               [](json& p) { p["metadata"]["annotations"]["x"] = "1"; });
  api_->Remove("/api/v1/namespaces/ns/pods/b");
  ASSERT_TRUE(handler_.WaitFor([](auto& log, auto&) { return Has(log, "DELETED b"); }));
  r.Stop();
  EXPECT_EQ(handler_.log(),
            (std::vector<std::string>{"LIST 1", "ADDED b", "MODIFIED a", "DELETED b"}));
  auto watches = Watches();
  ASSERT_FALSE(watches.empty());
  EXPECT_EQ(watches[0].query["resourceVersion"], list_rv);
  EXPECT_EQ(watches[0].query["allowWatchBookmarks"], "true");
  EXPECT_EQ(watches[0].query["fieldSelector"], "spec.nodeName=n1");
  EXPECT_TRUE(sleeper_.sleeps().empty());
}

TEST_F(ReflectorTest, ABookmarkMovesWhereTheNextWatchStarts) {
  Reflector r(*client_, NodeOptions(), handler_, sleeper_);
  r.Start();
  ASSERT_TRUE(api_->WaitForOpenWatches(1, seconds(10)));
  api_->Create("/api/v1/namespaces/ns/pods", Pod("elsewhere", "n2"));  // not ours
  const std::string bookmark_rv = std::to_string(api_->resource_version());
  api_->SendBookmark();
  for (int i = 0; i < 1000 && r.resource_version() != bookmark_rv; ++i) {
    std::this_thread::sleep_for(milliseconds(5));  // polling a condition with a bound
  }
  ASSERT_EQ(r.resource_version(), bookmark_rv);
  api_->DropConnections();
  ASSERT_TRUE(api_->WaitForRequests(
      [](auto& log) {
        int watches = 0;
        for (auto& q : log) watches += q.query.contains("watch") ? 1 : 0;
        return watches >= 2;
      },
      seconds(10)));
  r.Stop();
  auto watches = Watches();
  EXPECT_EQ(watches[1].query["resourceVersion"], bookmark_rv);
  EXPECT_EQ(r.lists(), 1u);  // resumed, not relisted
}

TEST_F(ReflectorTest, AWatchThatReceivesNothingIsRestartedAfterItsIdleDeadline) {
  Reflector::Options o = NodeOptions();
  o.idle_timeout_ms = 1000;  // the server would hold this watch for 300 s, silent
  Reflector r(*client_, o, handler_, sleeper_);
  r.Start();
  ASSERT_TRUE(api_->WaitForOpenWatches(1, seconds(10)));
  const std::string list_rv = r.resource_version();
  ASSERT_TRUE(api_->WaitForRequests(
      [](auto& log) {
        int watches = 0;
        for (auto& q : log) watches += q.query.contains("watch") ? 1 : 0;
        return watches >= 2;
      },
      seconds(20)));
  r.Stop();
  auto watches = Watches();
  EXPECT_EQ(watches[0].query["timeoutSeconds"], "300");
  EXPECT_EQ(watches[1].query["resourceVersion"], list_rv);  // resumed, not relisted
  EXPECT_EQ(r.lists(), 1u);
  EXPECT_NE(r.last_error().message().find("idle"), std::string::npos) << r.last_error().message();
}

TEST_F(ReflectorTest, HttpGoneRelistsAtOnce) {
  api_->Create("/api/v1/namespaces/ns/pods", Pod("a", "n1"));
  api_->FailNextWatchWithGone();
  Reflector r(*client_, NodeOptions(), handler_, sleeper_);
  r.Start();
  ASSERT_TRUE(handler_.WaitFor([](auto& log, auto&) { return Count(log, "LIST") == 2; }));
  ASSERT_TRUE(api_->WaitForOpenWatches(1, seconds(10)));
  r.Stop();
  EXPECT_EQ(r.lists(), 2u);
  EXPECT_TRUE(sleeper_.sleeps().empty());
}

TEST_F(ReflectorTest, AGoneEventRelists) {
  Reflector r(*client_, NodeOptions(), handler_, sleeper_);
  r.Start();
  ASSERT_TRUE(api_->WaitForOpenWatches(1, seconds(10)));
  api_->Create("/api/v1/namespaces/ns/pods", Pod("a", "n1"));
  ASSERT_TRUE(handler_.WaitFor([](auto& log, auto&) { return Has(log, "ADDED a"); }));
  api_->SendGoneToWatches();
  ASSERT_TRUE(handler_.WaitFor([](auto& log, auto&) { return Count(log, "LIST") == 2; }));
  r.Stop();
  EXPECT_EQ(handler_.log().back(), "LIST 1");
  EXPECT_TRUE(sleeper_.sleeps().empty());
}

TEST_F(ReflectorTest, ACompactedHistoryRelistsAndMissesNothing) {
  Reflector r(*client_, NodeOptions(), handler_, sleeper_);
  r.Start();
  ASSERT_TRUE(api_->WaitForOpenWatches(1, seconds(10)));
  api_->DropConnections();
  // While the reflector is away: changes, then the history is compacted.
  api_->Create("/api/v1/namespaces/ns/pods", Pod("while-away", "n1"));
  api_->Compact();
  ASSERT_TRUE(handler_.WaitFor([](auto&, auto& names) { return names.contains("while-away"); }));
  r.Stop();
  EXPECT_GE(r.lists(), 1u);
}

TEST_F(ReflectorTest, ErrorsBackOffExponentiallyUpToTheCap) {
  api_->FailNextRequests(6, 500);
  Reflector r(*client_, NodeOptions(), handler_, sleeper_);
  r.Start();
  ASSERT_TRUE(handler_.WaitFor([](auto& log, auto&) { return Count(log, "LIST") == 1; }));
  ASSERT_TRUE(api_->WaitForOpenWatches(1, seconds(10)));
  r.Stop();
  EXPECT_EQ(sleeper_.sleeps(),
            (std::vector<milliseconds>{milliseconds(100), milliseconds(200), milliseconds(400),
                                       milliseconds(800), milliseconds(800), milliseconds(800)}));
  EXPECT_EQ(r.errors(), 6u);
  EXPECT_NE(r.last_error().message().find("HTTP 500"), std::string::npos);
}

TEST_F(ReflectorTest, ADroppedWatchResumesAfterABackoffAndResets) {
  Reflector r(*client_, NodeOptions(), handler_, sleeper_);
  r.Start();
  ASSERT_TRUE(api_->WaitForOpenWatches(1, seconds(10)));
  api_->Create("/api/v1/namespaces/ns/pods", Pod("a", "n1"));
  ASSERT_TRUE(handler_.WaitFor([](auto& log, auto&) { return Has(log, "ADDED a"); }));
  api_->DropConnections();
  ASSERT_TRUE(api_->WaitForRequests(
      [](auto& log) {
        int watches = 0;
        for (auto& q : log) watches += q.query.contains("watch") ? 1 : 0;
        return watches >= 2;
      },
      seconds(10)));
  ASSERT_TRUE(api_->WaitForOpenWatches(1, seconds(10)));
  api_->Create("/api/v1/namespaces/ns/pods", Pod("b", "n1"));
  ASSERT_TRUE(handler_.WaitFor([](auto& log, auto&) { return Has(log, "ADDED b"); }));
  r.Stop();
  EXPECT_EQ(r.lists(), 1u);
  // One backoff at the first step (the watch had delivered, so no growth).
  EXPECT_EQ(sleeper_.sleeps(), std::vector<milliseconds>{milliseconds(100)});
  EXPECT_EQ(handler_.log(), (std::vector<std::string>{"LIST 0", "ADDED a", "ADDED b"}));
}

TEST_F(ReflectorTest, ARefusedTokenRecoversWhenTheFileRotates) {
  Reflector r(*client_, NodeOptions(), handler_, sleeper_);
  r.Start();
  ASSERT_TRUE(api_->WaitForOpenWatches(1, seconds(10)));
  api_->AcceptToken("token-2");
  api_->DropConnections();
  ASSERT_TRUE(api_->WaitForRequests(
      [](auto& log) { return !log.empty() && log.back().code == 401; }, seconds(10)));
  WriteFile(token_file_, "token-2");
  ASSERT_TRUE(api_->WaitForOpenWatches(1, seconds(10)));
  api_->Create("/api/v1/namespaces/ns/pods", Pod("a", "n1"));
  ASSERT_TRUE(handler_.WaitFor([](auto& log, auto&) { return Has(log, "ADDED a"); }));
  r.Stop();
  bool refused = false, accepted_after = false;
  for (const auto& q : api_->Requests()) {
    if (q.token == "token-1" && q.code == 401) refused = true;
    if (refused && q.token == "token-2" && q.code == 200) accepted_after = true;
  }
  EXPECT_TRUE(refused);
  EXPECT_TRUE(accepted_after);
}

TEST_F(ReflectorTest, WatchesEndedAtOnceWithNothingAreRetriedAfterABackoff) {
  Reflector::Options o = NodeOptions();
  o.watch_timeout_s = 0;  // the fake server ends each watch at once, empty
  Reflector r(*client_, o, handler_, sleeper_);
  r.Start();
  for (int i = 0; i < 2000 && sleeper_.sleeps().size() < 4; ++i) {
    std::this_thread::sleep_for(milliseconds(5));  // polling a condition with a bound
  }
  r.Stop();
  auto sleeps = sleeper_.sleeps();
  ASSERT_GE(sleeps.size(), 4u);
  EXPECT_EQ(std::vector<milliseconds>(sleeps.begin(), sleeps.begin() + 4),
            (std::vector<milliseconds>{milliseconds(100), milliseconds(200), milliseconds(400),
                                       milliseconds(800)}));
  EXPECT_EQ(r.lists(), 1u);  // resumed from the resourceVersion each time
  EXPECT_EQ(r.errors(), 0u);
}

TEST_F(ReflectorTest, StopEndsAWatchInFlight) {
  Reflector r(*client_, NodeOptions(), handler_, sleeper_);
  r.Start();
  ASSERT_TRUE(api_->WaitForOpenWatches(1, seconds(10)));
  r.Stop();
  EXPECT_TRUE(api_->WaitForOpenWatches(0, seconds(10)));
}

}  // namespace
}  // namespace gpuslice::daemon::kube
