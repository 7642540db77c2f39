#include "addpath/add_path.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

namespace gpuslice::addpath {
namespace {

// An environment held in a map; counts writes and can be told to fail them.
class FakeEnvironment final : public Environment {
 public:
  const char* Get(const char* name) override {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  }
  bool Set(const char* name, const char* value) override {
    ++sets;
    if (fail_sets) return false;
    vars[name] = value;
    return true;
  }
  std::optional<std::string> Value(const std::string& name) const {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  }

  std::map<std::string, std::string> vars;
  int sets = 0;
  bool fail_sets = false;
};

TEST(ApplyPathRulesTest, NoSourcesChangesNothing) {
  FakeEnvironment env;
  env.vars = {{"PATH", "/a::/b:"}, {"LD_PRELOAD", "/x.so /y.so"}};
  auto before = env.vars;
  EXPECT_EQ(ApplyPathRules(env), 0);
  EXPECT_EQ(env.vars, before);
  EXPECT_EQ(env.sets, 0);
}

TEST(ApplyPathRulesTest, AppendsEachVariable) {
  FakeEnvironment env;
  env.vars = {
      {"PATH", "/usr/bin"},    {"LD_PRELOAD", "/x/addpath.so"},   {"LD_LIBRARY_PATH", "/lib1"},
      {"TF_PATH", "/opt/bin"}, {"TF_LD_PRELOAD", "/y/custom.so"}, {"TF_LD_LIBRARY_PATH", "/lib2"}};
  EXPECT_EQ(ApplyPathRules(env), 3);
  EXPECT_EQ(env.Value("PATH"), "/usr/bin:/opt/bin");
  EXPECT_EQ(env.Value("LD_PRELOAD"), "/x/addpath.so:/y/custom.so");
  EXPECT_EQ(env.Value("LD_LIBRARY_PATH"), "/lib1:/lib2");
}

TEST(ApplyPathRulesTest, PrependsEachVariable) {
  FakeEnvironment env;
  env.vars = {{"PATH", "/usr/bin"},
              {"LD_PRELOAD", "/x/addpath.so"},
              {"LD_LIBRARY_PATH", "/lib1"},
              {"TF_PREPEND_PATH", "/opt/bin"},
              {"TF_PREPEND_LD_PRELOAD", "/y/custom.so"},
              {"TF_PREPEND_LD_LIBRARY_PATH", "/lib2"}};
  EXPECT_EQ(ApplyPathRules(env), 3);
  EXPECT_EQ(env.Value("PATH"), "/opt/bin:/usr/bin");
  EXPECT_EQ(env.Value("LD_PRELOAD"), "/y/custom.so:/x/addpath.so");
  EXPECT_EQ(env.Value("LD_LIBRARY_PATH"), "/lib2:/lib1");
}

TEST(ApplyPathRulesTest, CreatesUnsetTarget) {
  FakeEnvironment env;
  env.vars = {{"TF_LD_LIBRARY_PATH", "/lib2::"}, {"TF_PREPEND_PATH", "/p"}};
  EXPECT_EQ(ApplyPathRules(env), 2);
  EXPECT_EQ(env.Value("LD_LIBRARY_PATH"), "/lib2");
  EXPECT_EQ(env.Value("PATH"), "/p");
  EXPECT_EQ(env.Value("LD_PRELOAD"), std::nullopt);
}

TEST(ApplyPathRulesTest, EmptySourceNeitherCreatesNorNormalizesTarget) {
  FakeEnvironment env;
  env.vars = {{"TF_PATH", ""}, {"TF_LD_PRELOAD", " : "}, {"LD_PRELOAD", "/a.so  /b.so"}};
  EXPECT_EQ(ApplyPathRules(env), 0);
  EXPECT_EQ(env.Value("PATH"), std::nullopt);
  EXPECT_EQ(env.Value("LD_PRELOAD"), "/a.so  /b.so");
}

TEST(ApplyPathRulesTest, AppendAndPrependTogetherPutPrependFirst) {
  FakeEnvironment env;
  env.vars = {{"PATH", "/usr/bin"}, {"TF_PATH", "/a:/p"}, {"TF_PREPEND_PATH", "/p"}};
  ApplyPathRules(env);
  EXPECT_EQ(env.Value("PATH"), "/p:/usr/bin:/a");
}

TEST(ApplyPathRulesTest, SecondApplicationWritesNothing) {
  FakeEnvironment env;
  env.vars = {{"PATH", "/usr/bin"},      {"TF_PATH", "/a"},
              {"TF_PREPEND_PATH", "/p"}, {"TF_LD_PRELOAD", "/y.so"},
              {"LD_PRELOAD", "/x.so"},   {"TF_PREPEND_LD_LIBRARY_PATH", "/l"}};
  EXPECT_EQ(ApplyPathRules(env), 4);  // PATH twice, LD_PRELOAD, LD_LIBRARY_PATH
  auto after_first = env.vars;
  int sets = env.sets;
  EXPECT_EQ(ApplyPathRules(env), 0);
  EXPECT_EQ(env.vars, after_first);
  EXPECT_EQ(env.sets, sets);
}

TEST(ApplyPathRulesTest, FailedSetIsSkipped) {
  FakeEnvironment env;
  env.vars = {{"TF_PATH", "/a"}, {"TF_LD_PRELOAD", "/y.so"}};
  env.fail_sets = true;
  EXPECT_EQ(ApplyPathRules(env), 0);
  EXPECT_EQ(env.sets, 2);
  EXPECT_EQ(env.Value("PATH"), std::nullopt);
}

}  // namespace
}  // namespace gpuslice::addpath
