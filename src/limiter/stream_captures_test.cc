#include "limiter/stream_captures.h"

#include <gtest/gtest.h>

#include <map>

namespace gpuslice::limiter {
namespace {

// A driver's capture state in small: each stream's status, and how often
// cuStreamIsCapturing was asked.
struct FakeDriver {
  std::map<CUstream, CUstreamCaptureStatus> status;
  int queries = 0;
};
FakeDriver* g_driver = nullptr;

CUresult FakeIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  ++g_driver->queries;
  if (stream == nullptr || stream == CU_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  const auto it = g_driver->status.find(stream);
  *status = it != g_driver->status.end() ? it->second : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

// Distinct stream handles (never dereferenced).
CUstream Stream(int n) {
  static char handles[8];
  return reinterpret_cast<CUstream>(&handles[n]);
}

class StreamCapturesTest : public ::testing::Test {
 protected:
  void SetUp() override { g_driver = &driver_; }
  void TearDown() override { g_driver = nullptr; }

  // The driver's BeginCapture: refused on a stream already capturing.
  CUresult Begin(CUstream s) {
    return captures_.Begin([&] {
      if (driver_.status[s] != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
      driver_.status[s] = CU_STREAM_CAPTURE_STATUS_ACTIVE;
      return CUDA_SUCCESS;
    });
  }
  // The driver's EndCapture: ends an active or invalidated capture (the
  // latter with an error), refuses a stream not capturing, and, with
  // `wrong_thread`, refuses and leaves the capture open.
  CUresult End(CUstream s, bool wrong_thread = false) {
    return captures_.End(s, &FakeIsCapturing, [&] {
      const CUstreamCaptureStatus st = driver_.status[s];
      if (st == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
      if (wrong_thread) return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
      driver_.status[s] = CU_STREAM_CAPTURE_STATUS_NONE;
      return st == CU_STREAM_CAPTURE_STATUS_INVALIDATED ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                                                        : CUDA_SUCCESS;
    });
  }
  bool Capturing(CUstream s) const { return captures_.Capturing(s, &FakeIsCapturing); }

  FakeDriver driver_;
  StreamCaptures captures_;
};

TEST_F(StreamCapturesTest, NoCaptureOpenNeverAsksTheDriver) {
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(Capturing(Stream(1)));
  EXPECT_EQ(driver_.queries, 0);
}

TEST_F(StreamCapturesTest, AnOpenCaptureIsSeenAndAnEndedOneNoLonger) {
  ASSERT_EQ(Begin(Stream(1)), CUDA_SUCCESS);
  EXPECT_EQ(captures_.open(), 1);
  EXPECT_TRUE(Capturing(Stream(1)));
  EXPECT_FALSE(Capturing(Stream(2)));  // another stream: asked, not capturing
  ASSERT_EQ(End(Stream(1)), CUDA_SUCCESS);
  EXPECT_EQ(captures_.open(), 0);
  const int queries = driver_.queries;
  EXPECT_FALSE(Capturing(Stream(1)));
  EXPECT_EQ(driver_.queries, queries);
}

TEST_F(StreamCapturesTest, ARefusedBeginIsNotCounted) {
  ASSERT_EQ(Begin(Stream(1)), CUDA_SUCCESS);
  EXPECT_EQ(Begin(Stream(1)), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(captures_.open(), 1);
  ASSERT_EQ(End(Stream(1)), CUDA_SUCCESS);
  EXPECT_EQ(captures_.open(), 0);
}

TEST_F(StreamCapturesTest, ARefusedEndLeavesTheCaptureCounted) {
  ASSERT_EQ(Begin(Stream(1)), CUDA_SUCCESS);
  EXPECT_EQ(End(Stream(1), /*wrong_thread=*/true), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  EXPECT_EQ(captures_.open(), 1);
  EXPECT_TRUE(Capturing(Stream(1)));
}

TEST_F(StreamCapturesTest, EndingAnInvalidatedCaptureEndsIt) {
  ASSERT_EQ(Begin(Stream(1)), CUDA_SUCCESS);
  driver_.status[Stream(1)] = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  EXPECT_TRUE(Capturing(Stream(1)));  // still capturing until ended
  EXPECT_EQ(End(Stream(1)), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(captures_.open(), 0);
}

// An EndCapture on a stream that was not capturing changes nothing: were it
// counted, the count would go below zero, and the next capture would be
// missed (its launches paced, its allocations charged).
TEST_F(StreamCapturesTest, AnEndOfNoCaptureNeverHidesTheNextCapture) {
  EXPECT_EQ(End(Stream(1)), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(End(Stream(2)), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(captures_.open(), 0);
  ASSERT_EQ(Begin(Stream(3)), CUDA_SUCCESS);
  EXPECT_TRUE(Capturing(Stream(3)));
}

TEST_F(StreamCapturesTest, EndingOneCaptureKeepsTheOthersSeen) {
  ASSERT_EQ(Begin(Stream(1)), CUDA_SUCCESS);
  ASSERT_EQ(Begin(Stream(2)), CUDA_SUCCESS);
  ASSERT_EQ(End(Stream(1)), CUDA_SUCCESS);
  EXPECT_EQ(End(Stream(1)), CUDA_ERROR_ILLEGAL_STATE);  // twice: counted once
  EXPECT_EQ(captures_.open(), 1);
  EXPECT_FALSE(Capturing(Stream(1)));
  EXPECT_TRUE(Capturing(Stream(2)));
}

// A capture whose end the count did not see (a stream destroyed while
// capturing, say) leaves it high: the driver is then asked, and still says.
TEST_F(StreamCapturesTest, ACountTooHighOnlyAsksTheDriver) {
  ASSERT_EQ(Begin(Stream(1)), CUDA_SUCCESS);
  driver_.status.erase(Stream(1));  // gone without EndCapture
  EXPECT_FALSE(Capturing(Stream(1)));
  EXPECT_EQ(captures_.open(), 1);
}

TEST_F(StreamCapturesTest, TheLegacyStreamIsNeverAskedAbout) {
  ASSERT_EQ(Begin(Stream(1)), CUDA_SUCCESS);
  const int queries = driver_.queries;
  EXPECT_FALSE(Capturing(nullptr));
  EXPECT_FALSE(Capturing(CU_STREAM_LEGACY));
  EXPECT_EQ(driver_.queries, queries);
  EXPECT_FALSE(Capturing(CU_STREAM_PER_THREAD));  // asked: a per-thread stream can capture
  EXPECT_EQ(driver_.queries, queries + 1);
}

TEST_F(StreamCapturesTest, WithoutTheQueryNothingIsCapturing) {
  ASSERT_EQ(Begin(Stream(1)), CUDA_SUCCESS);
  EXPECT_FALSE(captures_.Capturing(Stream(1), nullptr));
}

TEST_F(StreamCapturesTest, ResetForgetsEveryCapture) {
  ASSERT_EQ(Begin(Stream(1)), CUDA_SUCCESS);
  captures_.Reset();
  EXPECT_EQ(captures_.open(), 0);
  EXPECT_FALSE(Capturing(Stream(1)));
}

}  // namespace
}  // namespace gpuslice::limiter
