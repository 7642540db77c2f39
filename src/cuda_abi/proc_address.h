// The driver's cuGetProcAddress contract as data: which exported symbol a
// request for (name, cudaVersion, flags) resolves to. Shared by the simulated
// driver (to answer such requests) and the limiter (to know which variant a
// caller receives). Generated from the toolkit by scripts/gen_driver_symbols.py.
//
// Thread-safe: the tables are immutable.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace gpuslice::cuda_abi {

enum class SymbolKind : uint8_t {
  kPlain,      // legacy default stream semantics
  kPerThread,  // a _ptds/_ptsz variant: per-thread default stream
};

struct DriverSymbol {
  std::string_view base;    // name as passed to cuGetProcAddress, e.g. "cuMemAlloc"
  int version;              // first CUDA version (e.g. 3020) that uses `symbol`
  std::string_view symbol;  // exported name, e.g. "cuMemAlloc_v2"
  SymbolKind kind;
};

// Every (base, version, symbol) the CUDA 13 driver knows, sorted by base.
std::span<const DriverSymbol> DriverSymbols();

// Every name a real libcuda.so.1 exports, sorted.
std::span<const std::string_view> DriverExports();

// Values of CUdriverProcAddressQueryResult.
enum class ProcLookup : int { kFound = 0, kSymbolNotFound = 1, kVersionNotSufficient = 2 };

struct ProcResolution {
  ProcLookup lookup;
  std::string_view symbol;  // set when lookup == kFound
};

// cuGetProcAddress flags (CUdriverProcAddress_flags).
inline constexpr uint64_t kProcAddressPerThreadDefaultStream = 1u << 1;

// Resolves a request as the driver does: the newest plain variant whose version
// is <= cuda_version; with kProcAddressPerThreadDefaultStream in `flags`, the
// newest per-thread variant <= cuda_version if the name has one.
ProcResolution ResolveProcAddress(std::string_view base, int cuda_version, uint64_t flags);

}  // namespace gpuslice::cuda_abi
