// Editing of ':'-separated search-path lists (PATH, LD_LIBRARY_PATH,
// LD_PRELOAD): the pure core of libgpuslice-addpath.so. No environment access,
// no logging; every function here is a plain function of its arguments.
//
// Thread-safe (no shared state).
#pragma once

#include <string>
#include <string_view>

namespace gpuslice::addpath {

// Where added entries go.
enum class EditMode {
  // Entries not yet present go to the end; an entry already present keeps its place.
  kAppend,
  // Entries go to the front in the order given; an entry already present is
  // moved to the front (a user who asks for "first" gets "first").
  kPrepend,
};

// Separator sets understood on input. Output always uses ':'.
inline constexpr std::string_view kPathSeparators = ":";
// glibc's ld.so splits LD_PRELOAD on both ' ' and ':'.
inline constexpr std::string_view kPreloadSeparators = ": ";

// Returns `current` with the entries of `addition` added according to `mode`.
//
// Both inputs are split on any character of `separators`. When `addition`
// holds no non-empty entry, `current` is returned verbatim (nothing to do means
// nothing is touched). Otherwise the result is the list
//   kAppend:  current entries, then addition entries
//   kPrepend: addition entries, then current entries
// with empty entries dropped and only the first occurrence of each entry kept,
// joined with ':'. Entries compare as exact strings ("/a" and "/a/" differ).
//
// Invariants (what makes nested shells stable):
//  1. Idempotent: EditPathList(EditPathList(c, a, m), a, m) == EditPathList(c, a, m).
//  2. Every non-empty entry of `current` and `addition` appears exactly once.
//  3. Relative order of surviving `current` entries is preserved.
//
// Cost: O(n log n) in the number of entries, a few allocations; no limit on
// the length of the inputs.
// REQUIRES: `separators` is non-empty.
std::string EditPathList(std::string_view current, std::string_view addition, EditMode mode,
                         std::string_view separators = kPathSeparators);

// True if `list` holds at least one non-empty entry.
bool HasEntries(std::string_view list, std::string_view separators = kPathSeparators);

}  // namespace gpuslice::addpath
