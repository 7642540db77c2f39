// Fuzzes the limit variables and quantities (DESIGN.md section 2): every
// variable ParseLimitConfig reads, the cgroup text DefaultGroup reads, and
// ParseBytes / ParsePercent / FormatBytes on their own.
//
// Input: fields separated by '\x01', in the order of kVars below, then the
// cgroup text. An empty field is an unset variable. Properties checked beyond
// "no crash, no sanitizer report": limits in range, a valid group, one-line
// errors, and byte quantities of plain digits parsed to their value.
#include <charconv>
#include <cmath>

#include "common/quantity.h"
#include "fuzz_input.h"
#include "limiter/core/limit_config.h"

namespace gpuslice {
namespace {

constexpr std::string_view kVars[] = {
    limiter::kEnvMemoryLimit,
    limiter::kEnvComputeLimit,
    limiter::kEnvGroup,
    limiter::kEnvTensorFusionMemLimit,
    limiter::kEnvTensorFusionUpLimit,
    limiter::kEnvHamiMemoryLimit,
    limiter::kEnvHamiSmLimit,
    "CUDA_DEVICE_MEMORY_LIMIT_0",
    "CUDA_DEVICE_MEMORY_LIMIT_1",
    "CUDA_DEVICE_SM_LIMIT_0",
    "CUDA_DEVICE_SM_LIMIT_1",
};
constexpr size_t kNumVars = sizeof(kVars) / sizeof(kVars[0]);

void CheckQuantities(const std::string& text) {
  auto bytes = ParseBytes(text);
  if (bytes.ok()) {
    (void)FormatBytes(*bytes);
    std::string_view t = Trim(text);
    uint64_t exact = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), exact);
    if (ec == std::errc() && end == t.data() + t.size()) {
      // Plain digits: the value, up to a double's rounding.
      const double diff = std::fabs(static_cast<double>(*bytes) - static_cast<double>(exact));
      if (diff > static_cast<double>(exact) * 1e-15) fuzz::Fail("ParseBytes value", text);
    }
  }
  auto percent = ParsePercent(text);
  if (percent.ok() && *percent > 100) fuzz::Fail("ParsePercent range", text);
  (void)FormatBytes(static_cast<uint64_t>(text.size()) << (text.size() % 64));
}

}  // namespace
}  // namespace gpuslice

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuslice;
  std::vector<std::string> fields = fuzz::Split(data, size, '\x01');
  fields.resize(gpuslice::kNumVars + 1);
  for (size_t i = 0; i < kNumVars; ++i) {
    if (!fields[i].empty()) CheckQuantities(fields[i]);
  }
  const std::string& cgroup = fields[kNumVars];

  auto env = [&](std::string_view name) -> const char* {
    for (size_t i = 0; i < kNumVars; ++i) {
      if (kVars[i] == name) return fields[i].empty() ? nullptr : fields[i].c_str();
    }
    return nullptr;
  };
  const std::vector<limiter::DeviceId> devices = {{0, "GPU-3430f3a1-52b6-4c1d-8a2e-0123456789ab"},
                                                  {1, "GPU-5678abcd-1234-4cde-9f00-fedcba987654"}};
  auto config = limiter::ParseLimitConfig(env, devices, cgroup, 4242);
  if (config.ok()) {
    if (!limiter::ValidGroupId(config->group)) fuzz::Fail("group", config->group);
    if (config->devices.size() != devices.size()) fuzz::Fail("devices", "size");
    for (const auto& d : config->devices) {
      if (d.memory_bytes && *d.memory_bytes == 0) fuzz::Fail("memory", "0");
      if (d.compute_percent && (*d.compute_percent < 1 || *d.compute_percent > 99)) {
        fuzz::Fail("compute", std::to_string(*d.compute_percent));
      }
    }
  } else if (!fuzz::OneLine(config.status().message())) {
    fuzz::Fail("one-line error", config.status().message());
  }
  const std::string group = limiter::DefaultGroup(cgroup, 4242);
  if (!limiter::ValidGroupId(group)) fuzz::Fail("DefaultGroup", group);
  (void)limiter::ValidGroupId(cgroup);
  return 0;
}
