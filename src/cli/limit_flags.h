// Limit flags as operators type them on the command line (`--memory 4GiB`,
// `--memory 0=4GiB,GPU-3430…=2GiB`, `--compute 50`), checked and turned into
// what the limiter reads (DESIGN.md section 2) or what a segment stores.
//
// Pure functions: no environment, no files, no output. Error messages name the
// offending value but not the flag; callers add the flag as context.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gpuslice::cli {

// The value of GPUSLICE_MEMORY_LIMIT for a `--memory` flag.
//
// `flag` is either one byte quantity for every device ("4GiB"; returned
// trimmed, as typed) or a comma-separated list of KEY=QUANTITY where KEY is a
// device index (decimal digits) or a GPU UUID (letters, digits and '-', with or
// without the "GPU-" prefix); the list becomes a JSON object in the order given,
// {"0":"4GiB","GPU-3430…":"2GiB"}, the form ParseLimitConfig accepts.
//
// Errors (InvalidArgument): an empty flag, key or value; a malformed key; a
// quantity ParseBytes rejects or of zero bytes; the same device twice (indexes
// compared as numbers, UUIDs case-insensitively and with or without "GPU-").
StatusOr<std::string> MemoryLimitEnv(std::string_view flag);

// The value of GPUSLICE_COMPUTE_LIMIT for a `--compute` flag: the same shapes
// with a percent 1..100 (an optional '%') as the value. One value is returned
// as its number ("50"); a list becomes {"0":50,"1":30}.
StatusOr<std::string> ComputeLimitEnv(std::string_view flag);

// A memory limit for a segment (`limit set --memory`): a positive byte
// quantity, or "unlimited" (case-insensitive) for kUnlimitedBytes.
StatusOr<uint64_t> ParseMemoryLimit(std::string_view text);

// A compute limit for a segment (`limit set --compute`): a percent 1..100;
// 100 is kUnlimitedPercent, i.e. no limit. "unlimited" is accepted too.
StatusOr<uint32_t> ParseComputeLimit(std::string_view text);

// A `--memory` / `--compute` flag as (device, value) pairs in the order given,
// for the daemon (`group set`): the same shapes as MemoryLimitEnv and
// ComputeLimitEnv, one value for every device (device "") or DEVICE=VALUE
// pairs (DEVICE as typed: an index or a UUID), each value as ParseMemoryLimit
// / ParseComputeLimit read it (so "unlimited" is kUnlimitedBytes /
// kUnlimitedPercent). The same errors as those functions.
StatusOr<std::vector<std::pair<std::string, uint64_t>>> MemoryLimitsByDevice(std::string_view flag);
StatusOr<std::vector<std::pair<std::string, uint32_t>>> ComputeLimitsByDevice(
    std::string_view flag);

}  // namespace gpuslice::cli
