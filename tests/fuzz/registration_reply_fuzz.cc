// Fuzzes the one HTTP reply parser of gpusliced's clients
// (src/common/http_reply.h: the limiter's registration and the CLI) and the
// limiter's side of registration (src/limiter/daemon_client.h): the
// daemon's reply as bytes arrive (ParseHttpReply, cut at a fuzzed point,
// then whole, with and without the peer's end of stream, and as the answer
// to a HEAD), and what a reply means (InterpretReply), also on the raw input
// as a 201/409/4xx body. The limiter runs inside the host program: nothing
// here may throw or crash.
//
// Input: byte 0 picks where the first read ends (as a fraction of the rest)
// and the status InterpretReply sees for the raw body; the rest is the reply.
// Properties checked: a complete reply has a three-digit status, lower-case
// header names and a body within the limit (none for a HEAD); a 201 is
// registered; granted compute is 1..100; env names are non-empty without '='.
#include <string>
#include <string_view>

#include "common/http_reply.h"
#include "fuzz_input.h"
#include "limiter/daemon_client.h"

namespace gpuslice {
namespace {

void CheckResult(const limiter::RegistrationResult& r, int status) {
  if (status == 201 && r.outcome != limiter::RegistrationResult::Outcome::kRegistered) {
    fuzz::Fail("201 not registered", r.message);
  }
  for (const auto& limit : r.effective_limits) {
    if (limit.compute_percent && (*limit.compute_percent < 1 || *limit.compute_percent > 100)) {
      fuzz::Fail("compute_percent", std::to_string(*limit.compute_percent));
    }
  }
  for (const auto& [name, value] : r.env) {
    if (name.empty() || name.find('=') != std::string::npos) fuzz::Fail("env name", name);
  }
  (void)limiter::OutcomeName(r.outcome);
}

void CheckParse(std::string_view raw, bool at_eof, const HttpReplyLimits& limits = {}) {
  auto parsed = ParseHttpReply(raw, at_eof, limits);
  if (!parsed.ok()) {
    if (!fuzz::OneLine(parsed.status().message())) fuzz::Fail("one-line error", raw);
    return;
  }
  if (!parsed->has_value()) {
    if (at_eof) fuzz::Fail("incomplete at end of stream", raw);
    return;
  }
  const HttpReply& reply = **parsed;
  if (reply.status < 100 || reply.status > 999) fuzz::Fail("status", std::to_string(reply.status));
  if (reply.body.size() > limits.max_body_bytes || (limits.head && !reply.body.empty())) {
    fuzz::Fail("body size", std::to_string(reply.body.size()));
  }
  for (const auto& [name, value] : reply.headers) {
    for (char c : name) {
      if (c >= 'A' && c <= 'Z') fuzz::Fail("header name not lower-cased", name);
    }
  }
  CheckResult(limiter::InterpretReply(reply, "g"), reply.status);
}

}  // namespace
}  // namespace gpuslice

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuslice;
  if (size == 0) return 0;
  const std::string_view raw(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t cut = raw.size() * data[0] / 255;
  CheckParse(raw.substr(0, cut), false);
  CheckParse(raw, false);
  CheckParse(raw, true);
  CheckParse(raw, true,
             HttpReplyLimits{.max_header_bytes = 256, .max_body_bytes = 64, .head = true});
  CheckParse(raw, true,
             HttpReplyLimits{.max_header_bytes = 256, .max_body_bytes = 64, .head = false});
  constexpr int kStatuses[] = {201, 409, 403, 500};
  const int status = kStatuses[data[0] % 4];
  CheckResult(limiter::InterpretReply(
                  HttpReply{.status = status, .headers = {}, .body = std::string(raw)}, "g"),
              status);
  return 0;
}
