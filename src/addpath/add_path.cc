#include "addpath/add_path.h"

#include <string>

#include "common/log.h"

namespace gpuslice::addpath {

int ApplyPathRules(Environment& env) {
  int written = 0;
  for (const PathRule& rule : kPathRules) {
    const char* source = env.Get(rule.source);
    if (source == nullptr || !HasEntries(source, rule.separators)) continue;
    const char* target = env.Get(rule.target);
    std::string_view current = target != nullptr ? target : "";
    std::string edited = EditPathList(current, source, rule.mode, rule.separators);
    if (target != nullptr && edited == current) {
      GS_LOG(kDebug, "addpath", "%s already holds %s=%s", rule.target, rule.source, source);
      continue;
    }
    if (!env.Set(rule.target, edited.c_str())) {
      GS_LOG(kWarn, "addpath", "could not set %s", rule.target);
      continue;
    }
    ++written;
    GS_LOG(kDebug, "addpath", "%s %s to %s: %s=%s",
           rule.mode == EditMode::kAppend ? "appended" : "prepended", rule.source, rule.target,
           rule.target, edited.c_str());
  }
  return written;
}

}  // namespace gpuslice::addpath
