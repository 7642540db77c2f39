#include "common/quantity.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

#include "common/str_cat.h"

namespace gpuslice {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

namespace {

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (tolower(static_cast<unsigned char>(a[i])) != tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

// Multiplier for `unit`, or 0 if it is not a unit.
double UnitMultiplier(std::string_view unit) {
  if (unit.empty() || unit == "b" || unit == "B") return 1;
  static constexpr char kPrefixes[] = "kmgtp";
  for (int i = 0; kPrefixes[i] != '\0'; ++i) {
    char p = kPrefixes[i];
    double binary = std::ldexp(1.0, 10 * (i + 1));
    double decimal = std::pow(1000.0, i + 1);
    std::string one(1, p);
    if (IEquals(unit, one) || IEquals(unit, one + "i") || IEquals(unit, one + "ib")) return binary;
    if (IEquals(unit, one + "b")) return decimal;
  }
  return 0;
}

}  // namespace

StatusOr<uint64_t> ParseBytes(std::string_view text) {
  std::string_view s = Trim(text);
  if (s.empty()) return InvalidArgument("empty byte quantity");
  size_t i = 0;
  bool digits = false, dot = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (isdigit(static_cast<unsigned char>(c))) {
      digits = true;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (!digits) {
    constexpr std::string_view kExpected =
        "' is not a byte quantity (expected a number such as 4GiB, 512MiB, 8G or 1073741824)";
    return InvalidArgument(StrCat({"'", text, kExpected}));
  }
  std::string_view unit = Trim(s.substr(i));
  double mult = UnitMultiplier(unit);
  if (mult == 0) {
    constexpr std::string_view kUnits =
        "' (use B, K/Ki/KiB, M/Mi/MiB, G/Gi/GiB, T/Ti/TiB or KB/MB/GB/TB)";
    return InvalidArgument(StrCat({"unknown unit '", unit, "' in '", text, kUnits}));
  }
  std::string number(s.substr(0, i));
  double value = std::strtod(number.c_str(), nullptr) * mult;
  if (!std::isfinite(value) || value >= 18446744073709551615.0) {
    return InvalidArgument(StrCat({"byte quantity '", text, "' is too large"}));
  }
  // Not llround: a long long saturates at 2^63, below many valid quantities.
  return static_cast<uint64_t>(std::round(value));
}

StatusOr<uint32_t> ParsePercent(std::string_view text) {
  std::string_view s = Trim(text);
  if (!s.empty() && s.back() == '%') s = Trim(s.substr(0, s.size() - 1));
  if (s.empty() || s.size() > 3) {
    return InvalidArgument(StrCat({"'", text, "' is not a percentage (expected 0-100)"}));
  }
  uint32_t v = 0;
  for (char c : s) {
    if (!isdigit(static_cast<unsigned char>(c))) {
      return InvalidArgument(StrCat({"'", text, "' is not a percentage (expected 0-100)"}));
    }
    v = v * 10 + (c - '0');
  }
  if (v > 100) {
    return InvalidArgument(StrCat({"percentage '", text, "' is above 100"}));
  }
  return v;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  auto v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return buf;
}

}  // namespace gpuslice
