// LedgerFixture: a Ledger bound to a group segment in a fresh temporary
// directory, with one device under a memory limit. The base of the unit
// tests of what charges that ledger (Ledger, PoolCharges, GraphMemCharges).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "limiter/ledger.h"
#include "shm/group_segment.h"

namespace gpuslice::limiter {

class LedgerFixture : public ::testing::Test {
 protected:
  explicit LedgerFixture(uint64_t memory_limit) : memory_limit_(memory_limit) {}

  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-ledger-fixture-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto seg = GroupSegment::Open(dir_, "g", true);
    ASSERT_TRUE(seg.ok()) << seg.status().ToString();
    segment_ = std::move(seg).value();
    device_ = *segment_->AttachDevice("GPU-00000000-1111-2222-3333-444444444444");
    segment_->SetMemoryLimit(device_, memory_limit_);
    ledger_.Bind(segment_.get());
  }
  void TearDown() override {
    segment_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // What the group has charged on the device.
  uint64_t Used() const { return segment_->ledger().MemoryUsed(device_); }

  std::string dir_;
  std::unique_ptr<GroupSegment> segment_;
  int device_ = 0;
  Ledger ledger_;

 private:
  const uint64_t memory_limit_;
};

}  // namespace gpuslice::limiter
