// Parsing and printing of byte quantities and percentages, as operators write
// them in environment variables, flags and config files.
//
// Byte quantities: a non-negative number (fractions allowed) with an optional
// unit. Binary units: K, M, G, T, P with or without "i"/"iB" (so "4G", "4Gi" and
// "4GiB" are all 4 * 2^30: the GPU world's convention, as in MPS and HAMi);
// SI units spelled with "B": KB, MB, GB, TB, PB are powers of 1000. "B" or no
// unit means bytes. Units are case-insensitive except that a lone "b" is bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpuslice {

StatusOr<uint64_t> ParseBytes(std::string_view text);

// An integer percentage 0..100, optionally followed by '%'.
StatusOr<uint32_t> ParsePercent(std::string_view text);

// "80.00 GiB", "512.00 MiB", "300 B": two decimals in the largest binary unit
// that keeps the number >= 1.
std::string FormatBytes(uint64_t bytes);

// Trims ASCII whitespace on both ends.
std::string_view Trim(std::string_view s);

}  // namespace gpuslice
