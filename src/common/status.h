// Status and StatusOr<T>: errors as values across module boundaries.
//
// Cheap to copy when OK (no allocation). A Status carries a code and a human
// readable message that names the offending input; callers add context with
// Status::WithContext rather than logging and returning.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace gpuslice {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,  // bad input: configuration, request, command line
  kNotFound,         // a named thing does not exist
  kAlreadyExists,
  kPermissionDenied,
  kResourceExhausted,   // out of memory, slots, queue space
  kFailedPrecondition,  // the system is not in a state where this can be done
  kUnavailable,         // a peer or resource is not there right now (retry may help)
  kUnimplemented,
  kInternal,  // an invariant broke; a bug
  kAborted,   // not done, or undone, because another part of the same request failed
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "context: message", keeping the code.
  Status WithContext(std::string_view context) const;
  // "CODE_NAME: message" (or "OK").
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }

// A T or the Status explaining why there is none. REQUIRES: a StatusOr is
// never built from an OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok());
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace gpuslice

// Evaluates `expr` (a Status); returns it from the enclosing function if not OK.
#define GS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::gpuslice::Status gs_status_ = (expr);  \
    if (!gs_status_.ok()) return gs_status_; \
  } while (0)

#define GS_CONCAT_INNER(a, b) a##b
#define GS_CONCAT(a, b) GS_CONCAT_INNER(a, b)
// GS_ASSIGN_OR_RETURN(auto x, StatusOrExpr): declares x from the value or
// returns the Status from the enclosing function.
#define GS_ASSIGN_OR_RETURN(lhs, expr) \
  GS_ASSIGN_OR_RETURN_IMPL(GS_CONCAT(gs_statusor_, __LINE__), lhs, expr)
// NOLINTBEGIN(bugprone-macro-parentheses): `tmp` is a variable name and `lhs` a declaration
#define GS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)
