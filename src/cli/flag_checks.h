// CLI11 checks for gpuslice's flags. A value that fails one becomes a CLI11
// ValidationError, printed as "--flag: problem" and ending the command with
// kExitUsage, before the command runs.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "limiter/core/limit_config.h"

namespace gpuslice::cli {

// A check from a parser (a function of std::string_view returning a
// StatusOr): the parser's error message, or valid.
template <typename Parse>
CLI::Validator CheckedBy(Parse parse, const std::string& value_name) {
  return CLI::Validator(
      [parse](std::string& value) -> std::string {
        auto parsed = parse(value);
        return parsed.ok() ? "" : parsed.status().message();
      },
      value_name);
}

// A group id (limiter::ValidGroupId).
inline CLI::Validator GroupIdCheck() {
  return {[](std::string& group) -> std::string {
            if (limiter::ValidGroupId(group)) return "";
            return "'" + group +
                   "' is not a group id (1-100 characters of A-Z a-z 0-9 . _ -, not starting "
                   "with '.')";
          },
          "GROUP"};
}

}  // namespace gpuslice::cli
