// Fuzzes the MPS v3 configuration file of the simulated control daemon
// (docs/sim-mps.md "MPS v3"): the strict TOML subset reader (ParseToml) and the
// schema check (ParseV3Config) on the same input.
//
// Properties beyond "no crash, no sanitizer report": every value the reader
// returns names a line of the input, and a configuration that passes has the
// documented schema version, thread percentages in (0, 100], priorities 0 or
// 1, and partitions of at least one chunk.
#include "fuzz_input.h"
#include "sim/mps/toml.h"
#include "sim/mps/v3_config.h"

namespace {

using gpuslice::sim::mps::TomlTable;

void CheckLines(const TomlTable& t, int lines, std::string_view text) {
  for (const auto& [key, value] : t) {
    if (key.empty() || value.line < 1 || value.line > lines) {
      gpuslice::fuzz::Fail("a value with an empty key or a line outside the input", text);
    }
    if (value.is_table()) CheckLines(value.table(), lines, text);
    if (value.is_table_array()) {
      for (const TomlTable& e : value.table_array()) CheckLines(e, lines, text);
    }
  }
}

void CheckLimits(const gpuslice::sim::mps::V3Limits& l, std::string_view text) {
  if (l.thread_percent && !(*l.thread_percent > 0 && *l.thread_percent <= 100)) {
    gpuslice::fuzz::Fail("a thread percentage outside (0, 100]", text);
  }
  if (l.priority && *l.priority > 1) gpuslice::fuzz::Fail("a priority other than 0 or 1", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuslice::sim::mps;  // NOLINT(google-build-using-namespace)
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  int lines = 1;
  for (char c : text) lines += c == '\n' ? 1 : 0;
  if (auto t = ParseToml(text); t.ok()) CheckLines(*t, lines, text);
  if (auto c = ParseV3Config(text); c.ok()) {
    if (c->schema_version != "1.0") gpuslice::fuzz::Fail("a schema version other than 1.0", text);
    for (const V3Server& s : c->servers) {
      CheckLimits(s.limits, text);
      for (const auto& [name, l] : s.namespaces) CheckLimits(l, text);
      for (const V3Device& d : s.devices) {
        for (const V3SmPartition& p : d.sm_partitions) {
          if (p.chunks == 0) gpuslice::fuzz::Fail("a partition of no chunk", text);
        }
      }
    }
  }
  return 0;
}
