#include "cuda_abi/proc_address.h"

#include <algorithm>

namespace gpuslice::cuda_abi {
namespace {

constexpr DriverSymbol kSymbols[] = {
#define GS_DRIVER_SYMBOL(base, version, symbol, kind) \
  {#base, version, #symbol, SymbolKind::k##kind},
#include "cuda_abi/driver_symbols.inc"
#undef GS_DRIVER_SYMBOL
};

constexpr std::string_view kExports[] = {
#define GS_DRIVER_EXPORT(name) #name,
#include "cuda_abi/driver_exports.inc"
#undef GS_DRIVER_EXPORT
};

}  // namespace

std::span<const DriverSymbol> DriverSymbols() { return kSymbols; }
std::span<const std::string_view> DriverExports() { return kExports; }

ProcResolution ResolveProcAddress(std::string_view base, int cuda_version, uint64_t flags) {
  auto [first, last] = std::equal_range(
      std::begin(kSymbols), std::end(kSymbols), base, [](const auto& a, const auto& b) {
        if constexpr (std::is_same_v<std::decay_t<decltype(a)>, DriverSymbol>) {
          return a.base < b;
        } else {
          return a < b.base;
        }
      });
  if (first == last) return {ProcLookup::kSymbolNotFound, {}};

  const bool per_thread = (flags & kProcAddressPerThreadDefaultStream) != 0;
  const DriverSymbol* best_plain = nullptr;
  const DriverSymbol* best_per_thread = nullptr;
  for (auto it = first; it != last; ++it) {
    if (it->version > cuda_version) continue;
    auto& best = it->kind == SymbolKind::kPlain ? best_plain : best_per_thread;
    if (best == nullptr || it->version > best->version) best = &*it;
  }
  const DriverSymbol* chosen = per_thread && best_per_thread ? best_per_thread : best_plain;
  if (chosen == nullptr) return {ProcLookup::kVersionNotSufficient, {}};
  return {ProcLookup::kFound, chosen->symbol};
}

}  // namespace gpuslice::cuda_abi
