#include "sim/core/nvml_faults.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

namespace gpuslice::sim {
namespace {

// NVML's error codes (src/nvml_abi/nvml.h), by name without NVML_ERROR_.
struct NamedError {
  const char* name;
  int code;
};
constexpr NamedError kErrors[] = {
    {"UNINITIALIZED", 1},
    {"INVALID_ARGUMENT", 2},
    {"NOT_SUPPORTED", 3},
    {"NO_PERMISSION", 4},
    {"ALREADY_INITIALIZED", 5},
    {"NOT_FOUND", 6},
    {"INSUFFICIENT_SIZE", 7},
    {"INSUFFICIENT_POWER", 8},
    {"DRIVER_NOT_LOADED", 9},
    {"TIMEOUT", 10},
    {"IRQ_ISSUE", 11},
    {"LIBRARY_NOT_FOUND", 12},
    {"FUNCTION_NOT_FOUND", 13},
    {"CORRUPTED_INFOROM", 14},
    {"GPU_IS_LOST", 15},
    {"RESET_REQUIRED", 16},
    {"OPERATING_SYSTEM", 17},
    {"LIB_RM_VERSION_MISMATCH", 18},
    {"IN_USE", 19},
    {"MEMORY", 20},
    {"NO_DATA", 21},
    {"VGPU_ECC_NOT_SUPPORTED", 22},
    {"INSUFFICIENT_RESOURCES", 23},
    {"FREQ_NOT_SUPPORTED", 24},
    {"ARGUMENT_VERSION_MISMATCH", 25},
    {"DEPRECATED", 26},
    {"NOT_READY", 27},
    {"GPU_NOT_FOUND", 28},
    {"INVALID_STATE", 29},
    {"RESET_TYPE_NOT_SUPPORTED", 30},
    {"UNKNOWN", 999},
};

template <typename T>
bool ParseNumber(std::string_view text, T* out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

bool ValidFunctionName(std::string_view name) {
  if (name == "*") return true;
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string NvmlFaultsPath(const std::string& state_path) { return state_path + ".nvml-faults"; }

StatusOr<int> ParseNvmlError(std::string_view name) {
  if (name.starts_with("NVML_ERROR_")) name.remove_prefix(11);
  for (const NamedError& e : kErrors) {
    if (name == e.name) return e.code;
  }
  int code = 0;
  if (ParseNumber(name, &code) && code > 0) return code;
  return InvalidArgument("unknown NVML error \"" + std::string(name) +
                         "\" (a name such as GPU_IS_LOST or UNKNOWN, or a positive number)");
}

std::string NvmlErrorName(int error) {
  for (const NamedError& e : kErrors) {
    if (error == e.code) return e.name;
  }
  return std::to_string(error);
}

StatusOr<NvmlFaultRule> ParseNvmlFaultRule(std::string_view line) {
  const std::vector<std::string_view> f = Fields(line);
  auto bad = [&](const std::string& why) {
    return InvalidArgument("NVML fault rule \"" + std::string(line) + "\": " + why);
  };
  if (f.size() < 3) return bad("expected <function|*> <gpu|*> <error> [after=N] [times=M]");
  NvmlFaultRule r;
  if (!ValidFunctionName(f[0])) return bad("bad function name");
  r.function = std::string(f[0]);
  if (f[1] != "*" && (!ParseNumber(f[1], &r.gpu) || r.gpu < 0)) return bad("bad gpu");
  StatusOr<int> error = ParseNvmlError(f[2]);
  if (!error.ok()) return bad(error.status().message());
  r.error = *error;
  for (size_t i = 3; i < f.size(); ++i) {
    if (f[i].starts_with("after=")) {
      if (!ParseNumber(f[i].substr(6), &r.after)) return bad("bad after=");
    } else if (f[i].starts_with("times=")) {
      if (!ParseNumber(f[i].substr(6), &r.times)) return bad("bad times=");
    } else {
      return bad("unknown field \"" + std::string(f[i]) + "\"");
    }
  }
  return r;
}

std::string FormatNvmlFaultRule(const NvmlFaultRule& rule) {
  std::string out = rule.function + " " + (rule.gpu < 0 ? "*" : std::to_string(rule.gpu)) + " " +
                    NvmlErrorName(rule.error);
  if (rule.after != 0) out += " after=" + std::to_string(rule.after);
  if (rule.times != 0) out += " times=" + std::to_string(rule.times);
  return out;
}

StatusOr<std::vector<NvmlFaultRule>> ReadNvmlFaults(const std::string& state_path) {
  std::vector<NvmlFaultRule> rules;
  std::ifstream in(NvmlFaultsPath(state_path));
  if (!in) return rules;
  std::string line;
  while (std::getline(in, line)) {
    if (Fields(line).empty() || line[line.find_first_not_of(" \t")] == '#') continue;
    GS_ASSIGN_OR_RETURN(NvmlFaultRule r, ParseNvmlFaultRule(line));
    rules.push_back(std::move(r));
  }
  return rules;
}

Status WriteNvmlFaults(const std::string& state_path, const std::vector<NvmlFaultRule>& rules) {
  const std::string path = NvmlFaultsPath(state_path);
  if (rules.empty()) {
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Internal("cannot remove " + path + ": " + strerror(errno));
    }
    return Status::Ok();
  }
  std::string text;
  for (const NvmlFaultRule& r : rules) text += FormatNvmlFaultRule(r) + "\n";
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return Internal("cannot create " + tmp + ": " + strerror(errno));
  const ssize_t w = write(fd, text.data(), text.size());
  const int err = errno;
  close(fd);
  if (w != static_cast<ssize_t>(text.size()) || rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = w != static_cast<ssize_t>(text.size()) ? err : errno;
    unlink(tmp.c_str());
    return Internal("cannot write " + path + ": " + strerror(e));
  }
  return Status::Ok();
}

NvmlFaultInjector::NvmlFaultInjector(std::string state_path) : state_path_(std::move(state_path)) {}

void NvmlFaultInjector::RefreshLocked() {
  Signature now;
  struct stat st {};
  if (stat(NvmlFaultsPath(state_path_).c_str(), &st) == 0) {
    now.inode = st.st_ino;
    now.size = st.st_size;
    now.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  }
  if (now == seen_) return;
  seen_ = now;
  StatusOr<std::vector<NvmlFaultRule>> rules = ReadNvmlFaults(state_path_);
  rules_ = rules.ok() ? std::move(*rules) : std::vector<NvmlFaultRule>{};
  matched_.assign(rules_.size(), 0);
}

int NvmlFaultInjector::Check(std::string_view function, int gpu) {
  std::lock_guard lock(mu_);
  RefreshLocked();
  int error = 0;
  for (size_t i = 0; i < rules_.size(); ++i) {
    const NvmlFaultRule& r = rules_[i];
    if ((r.function != "*" && r.function != function) || (r.gpu >= 0 && r.gpu != gpu)) continue;
    const uint64_t n = matched_[i]++;
    const bool fails = n >= r.after && (r.times == 0 || n < r.after + r.times);
    if (fails && error == 0) error = r.error;
  }
  return error;
}

}  // namespace gpuslice::sim
