#include "common/http_reply.h"

#include <gtest/gtest.h>

namespace gpuslice {
namespace {

TEST(ParseHttpReplyTest, ReadsTheBodyByContentLength) {
  const std::string raw = "HTTP/1.1 201 Created\r\ncontent-length: 2\r\nX: y\r\n\r\n{}";
  auto r = ParseHttpReply(raw, false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->status, 201);
  EXPECT_EQ((*r)->body, "{}");
  // Every prefix is incomplete, not an error.
  for (size_t n = 0; n < raw.size(); ++n) {
    auto partial = ParseHttpReply(std::string_view(raw).substr(0, n), false);
    ASSERT_TRUE(partial.ok()) << n;
    EXPECT_FALSE(partial->has_value()) << n;
  }
}

TEST(ParseHttpReplyTest, WithoutContentLengthTheBodyRunsToTheEnd) {
  const std::string raw = "HTTP/1.0 503 Service Unavailable\r\n\r\nbusy";
  auto more = ParseHttpReply(raw, false);
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(more->has_value());
  auto done = ParseHttpReply(raw, true);
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE(done->has_value());
  EXPECT_EQ((*done)->status, 503);
  EXPECT_EQ((*done)->body, "busy");
}

TEST(ParseHttpReplyTest, RefusesWhatItCannotRead) {
  for (const char* raw : {"SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.1 20x OK\r\n\r\n",
                          "HTTP/1.1 201 Created\r\nContent-Length: 1x\r\n\r\n",
                          "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}"}) {
    EXPECT_FALSE(ParseHttpReply(raw, false).ok()) << raw;
  }
  // Closed early.
  EXPECT_FALSE(ParseHttpReply("HTTP/1.1 201 Created\r\nContent-Length: 9\r\n\r\n{}", true).ok());
  EXPECT_FALSE(ParseHttpReply("HTTP/1.1 201", true).ok());
  EXPECT_FALSE(ParseHttpReply(std::string(size_t{70} * 1024, 'x'), false).ok());
}

TEST(ParseHttpReplyTest, KeepsTheHeadersByLowerCaseName) {
  auto r = ParseHttpReply(
      "HTTP/1.1 200 OK\r\nContent-Type:  application/json \r\nno colon\r\nX-A: 1\r\n"
      "x-a: 2\r\nContent-Length: 0\r\n\r\n",
      false);
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status().ToString();
  EXPECT_EQ((*r)->headers.at("content-type"), "application/json");
  EXPECT_EQ((*r)->headers.at("x-a"), "2");  // the last of a repeated one
  EXPECT_EQ((*r)->headers.size(), 3u);
  EXPECT_EQ((*r)->body, "");
}

TEST(ParseHttpReplyTest, AHeadsAnswerHasNoBodyWhateverItsLengthSays) {
  HttpReplyLimits head;
  head.head = true;
  auto r = ParseHttpReply("HTTP/1.1 200 OK\r\nContent-Length: 120\r\n\r\n", false, head);
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status().ToString();
  EXPECT_EQ((*r)->status, 200);
  EXPECT_EQ((*r)->headers.at("content-length"), "120");
  EXPECT_EQ((*r)->body, "");
  // Without `head` the same bytes wait for the 120.
  auto get = ParseHttpReply("HTTP/1.1 200 OK\r\nContent-Length: 120\r\n\r\n", false);
  ASSERT_TRUE(get.ok());
  EXPECT_FALSE(get->has_value());
}

TEST(ParseHttpReplyTest, HoldsToItsLimits) {
  const HttpReplyLimits small{.max_header_bytes = 64, .max_body_bytes = 4, .head = false};
  EXPECT_TRUE(
      ParseHttpReply("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcd", false, small).ok());
  EXPECT_FALSE(
      ParseHttpReply("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabcd", false, small).ok());
  EXPECT_FALSE(ParseHttpReply("HTTP/1.1 200 OK\r\n\r\nabcde", true, small).ok());
  const std::string long_header = "HTTP/1.1 200 OK\r\nX: " + std::string(80, 'y') + "\r\n\r\n";
  EXPECT_FALSE(ParseHttpReply(long_header, false, small).ok());
  EXPECT_TRUE(ParseHttpReply(long_header, true).ok());  // within the default 64 KiB
  // A body over the limit is refused before it has all arrived.
  EXPECT_FALSE(ParseHttpReply("HTTP/1.1 200 OK\r\nContent-Length: 9000000000\r\n\r\n", false).ok());
}

TEST(ParseHttpReplyTest, BytesAfterTheBodyAreNotTheReplys) {
  auto r = ParseHttpReply("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 200", false);
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->body, "{}");
}

}  // namespace
}  // namespace gpuslice
