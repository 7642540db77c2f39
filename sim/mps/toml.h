// A strict parser for the subset of TOML that the MPS v3 configuration file
// uses (docs/sim-mps.md "MPS v3"): comments, `key = value` lines with bare or
// quoted keys, dotted table headers `[a.b.c]`, arrays of tables `[[a.b]]`,
// and values that are basic strings ("..." with \" \\ \n \t escapes),
// decimal integers and booleans. Anything else (inline tables, arrays,
// floats, dates, multi-line strings, dotted keys on the left of `=`) is an
// error naming its line, as is a key or table defined twice. The file is
// outside input: the parser never reads past its text and never throws.
//
// Pure; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"

namespace gpuslice::sim::mps {

struct TomlValue;
// Keys in order of name (the schema does not depend on order within a table).
using TomlTable = std::map<std::string, TomlValue>;
using TomlTableArray = std::vector<TomlTable>;

struct TomlValue {
  // String, integer, boolean, a table, or an array of tables. Tables are held
  // by pointer so the type can contain itself.
  std::variant<std::string, int64_t, bool, std::shared_ptr<TomlTable>,
               std::shared_ptr<TomlTableArray>>
      v;
  int line = 0;  // where it was defined (1-based)

  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_int() const { return std::holds_alternative<int64_t>(v); }
  bool is_bool() const { return std::holds_alternative<bool>(v); }
  bool is_table() const { return std::holds_alternative<std::shared_ptr<TomlTable>>(v); }
  bool is_table_array() const { return std::holds_alternative<std::shared_ptr<TomlTableArray>>(v); }
  // REQUIRES: the matching is_*().
  const std::string& str() const { return std::get<std::string>(v); }
  int64_t integer() const { return std::get<int64_t>(v); }
  bool boolean() const { return std::get<bool>(v); }
  const TomlTable& table() const { return *std::get<std::shared_ptr<TomlTable>>(v); }
  const TomlTableArray& table_array() const {
    return *std::get<std::shared_ptr<TomlTableArray>>(v);
  }
};

// InvalidArgument "line N: ..." on the first error.
StatusOr<TomlTable> ParseToml(std::string_view text);

}  // namespace gpuslice::sim::mps
