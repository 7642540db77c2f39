// LD_PRELOAD with one library placed first, as `gpuslice run` gives it to the
// command it starts (the limiter must be loaded before anything that could
// reach the driver).
//
// Pure: no environment access.
#pragma once

#include <string>
#include <string_view>

namespace gpuslice::cli {

// The value of LD_PRELOAD that loads `library` first, then every entry of
// `existing` (the current value; entries separated by ':' or spaces, as ld.so
// reads them) in their order, joined with ':'. Entries equal to `library` are
// dropped (no duplicate), and so are empty ones.
//
// REQUIRES: `library` is non-empty and contains neither ':' nor a space.
std::string PrependPreload(std::string_view existing, std::string_view library);

}  // namespace gpuslice::cli
