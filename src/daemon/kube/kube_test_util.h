// Helpers for the kube tests: a temporary directory, a file writer, and a
// FakeKubeApi with a client configured for it.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "daemon/kube/kube_client.h"
#include "tests/support/fake_kube_api.h"

namespace gpuslice::daemon::kube {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "/kube.XXXXXX";
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& text) {
  // Through a new file renamed into place, as the kubelet rotates tokens.
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
  }
  std::filesystem::rename(tmp, path);
}

// A fake API server accepting "token-1" and a client that presents it.
class FakeApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto api = testing::FakeKubeApi::Start(dir_.path());
    ASSERT_TRUE(api.ok()) << api.status().ToString();
    api_ = std::move(*api);
    api_->AcceptToken("token-1");
    token_file_ = dir_.path() + "/token";
    WriteFile(token_file_, "token-1\n");
    auto config = ExplicitConfig(api_->url(), api_->ca_file(), token_file_);
    ASSERT_TRUE(config.ok());
    config->request_timeout_ms = 5'000;
    client_ = std::make_unique<KubeClient>(*config);
  }

  TempDir dir_;
  std::unique_ptr<testing::FakeKubeApi> api_;
  std::string token_file_;
  std::unique_ptr<KubeClient> client_;
};

}  // namespace gpuslice::daemon::kube
