#include "cli/limit_flags.h"

#include <cctype>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "common/quantity.h"
#include "common/str_cat.h"
#include "gpuslice/group_segment.h"

namespace gpuslice::cli {
namespace {

bool IsUnlimited(std::string_view text) {
  text = Trim(text);
  constexpr std::string_view kWord = "unlimited";
  if (text.size() != kWord.size()) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (tolower(static_cast<unsigned char>(text[i])) != kWord[i]) return false;
  }
  return true;
}

// A device key in the form used to detect duplicates: an index without
// leading zeros, or a lower-case UUID without "gpu-". Empty if malformed.
std::string CanonicalKey(std::string_view key) {
  bool digits = !key.empty();
  for (char c : key) digits = digits && isdigit(static_cast<unsigned char>(c));
  if (digits) {
    while (key.size() > 1 && key.front() == '0') key.remove_prefix(1);
    return StrCat({"#", key});
  }
  std::string uuid;
  for (char c : key) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-') return "";
    uuid += static_cast<char>(tolower(static_cast<unsigned char>(c)));
  }
  if (uuid.starts_with("gpu-")) uuid.erase(0, 4);
  if (uuid.empty() || uuid.size() >= static_cast<size_t>(kUuidBytes)) return "";
  return uuid;
}

// Splits `flag` into KEY=VALUE pairs, or returns a single pair with an empty
// key when `flag` has no '='. Checks the keys (not the values).
StatusOr<std::vector<std::pair<std::string, std::string>>> SplitFlag(std::string_view flag) {
  flag = Trim(flag);
  if (flag.empty()) return InvalidArgument("empty value");
  std::vector<std::pair<std::string, std::string>> items;
  if (flag.find('=') == std::string_view::npos) {
    items.emplace_back("", std::string(flag));
    return items;
  }
  std::set<std::string> seen;
  while (true) {
    const size_t comma = flag.find(',');
    const std::string_view item = Trim(flag.substr(0, comma));
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgument(
          StrCat({"'", item, "' is not DEVICE=VALUE (DEVICE: an index or a GPU UUID)"}));
    }
    const std::string key(Trim(item.substr(0, eq)));
    const std::string value(Trim(item.substr(eq + 1)));
    const std::string canonical = CanonicalKey(key);
    if (canonical.empty()) {
      return InvalidArgument("'" + key + "' in '" + std::string(item) +
                             "' is not a device index or GPU UUID");
    }
    if (value.empty()) return InvalidArgument("no value for device '" + key + "'");
    if (!seen.insert(canonical).second) {
      return InvalidArgument("device '" + key + "' is given twice");
    }
    items.emplace_back(key, value);
    if (comma == std::string_view::npos) break;
    flag.remove_prefix(comma + 1);
  }
  return items;
}

StatusOr<uint64_t> PositiveBytes(std::string_view text) {
  GS_ASSIGN_OR_RETURN(uint64_t bytes, ParseBytes(text));
  if (bytes == 0) return InvalidArgument("a memory limit of 0 bytes is not allowed");
  return bytes;
}

StatusOr<uint32_t> Percent(std::string_view text) {
  GS_ASSIGN_OR_RETURN(uint32_t percent, ParsePercent(text));
  if (percent == 0) return InvalidArgument("a compute limit must be 1..100%, not 0");
  return percent;
}

}  // namespace

StatusOr<std::string> MemoryLimitEnv(std::string_view flag) {
  GS_ASSIGN_OR_RETURN(auto items, SplitFlag(flag));
  nlohmann::ordered_json object = nlohmann::ordered_json::object();
  for (const auto& [key, value] : items) {
    if (auto bytes = PositiveBytes(value); !bytes.ok()) return bytes.status();
    if (key.empty()) return value;
    object[key] = value;
  }
  return object.dump();
}

StatusOr<std::string> ComputeLimitEnv(std::string_view flag) {
  GS_ASSIGN_OR_RETURN(auto items, SplitFlag(flag));
  nlohmann::ordered_json object = nlohmann::ordered_json::object();
  for (const auto& [key, value] : items) {
    GS_ASSIGN_OR_RETURN(uint32_t percent, Percent(value));
    if (key.empty()) return std::to_string(percent);
    object[key] = percent;
  }
  return object.dump();
}

StatusOr<uint64_t> ParseMemoryLimit(std::string_view text) {
  if (IsUnlimited(text)) return kUnlimitedBytes;
  return PositiveBytes(text);
}

StatusOr<uint32_t> ParseComputeLimit(std::string_view text) {
  if (IsUnlimited(text)) return kUnlimitedPercent;
  return Percent(text);
}

StatusOr<std::vector<std::pair<std::string, uint64_t>>> MemoryLimitsByDevice(
    std::string_view flag) {
  GS_ASSIGN_OR_RETURN(auto items, SplitFlag(flag));
  std::vector<std::pair<std::string, uint64_t>> out;
  for (auto& [key, value] : items) {
    GS_ASSIGN_OR_RETURN(uint64_t bytes, ParseMemoryLimit(value));
    out.emplace_back(std::move(key), bytes);
  }
  return out;
}

StatusOr<std::vector<std::pair<std::string, uint32_t>>> ComputeLimitsByDevice(
    std::string_view flag) {
  GS_ASSIGN_OR_RETURN(auto items, SplitFlag(flag));
  std::vector<std::pair<std::string, uint32_t>> out;
  for (auto& [key, value] : items) {
    GS_ASSIGN_OR_RETURN(uint32_t percent, ParseComputeLimit(value));
    out.emplace_back(std::move(key), percent);
  }
  return out;
}

}  // namespace gpuslice::cli
