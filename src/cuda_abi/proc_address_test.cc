#include "cuda_abi/proc_address.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace gpuslice::cuda_abi {
namespace {

std::string_view Resolve(std::string_view base, int version, uint64_t flags = 0) {
  ProcResolution r = ResolveProcAddress(base, version, flags);
  return r.lookup == ProcLookup::kFound ? r.symbol : "<none>";
}

TEST(ResolveProcAddress, PicksTheVariantACudaVersionWouldGet) {
  EXPECT_EQ(Resolve("cuMemAlloc", 13000), "cuMemAlloc_v2");
  EXPECT_EQ(Resolve("cuMemAlloc", 3010), "cuMemAlloc");
  EXPECT_EQ(Resolve("cuCtxCreate", 11040), "cuCtxCreate_v3");
  EXPECT_EQ(Resolve("cuCtxCreate", 12050), "cuCtxCreate_v4");
  EXPECT_EQ(Resolve("cuCtxCreate", 12040), "cuCtxCreate_v3");
  EXPECT_EQ(Resolve("cuGetProcAddress", 12000), "cuGetProcAddress_v2");
  EXPECT_EQ(Resolve("cuGetProcAddress", 11080), "cuGetProcAddress");
}

TEST(ResolveProcAddress, PerThreadFlagSelectsPtdsAndPtsz) {
  EXPECT_EQ(Resolve("cuLaunchKernel", 12000, kProcAddressPerThreadDefaultStream),
            "cuLaunchKernel_ptsz");
  EXPECT_EQ(Resolve("cuLaunchKernel", 12000), "cuLaunchKernel");
  EXPECT_EQ(Resolve("cuMemcpyHtoD", 12000, kProcAddressPerThreadDefaultStream),
            "cuMemcpyHtoD_v2_ptds");
  EXPECT_EQ(Resolve("cuStreamBeginCapture", 10010, kProcAddressPerThreadDefaultStream),
            "cuStreamBeginCapture_v2_ptsz");
  // No per-thread form: the plain one.
  EXPECT_EQ(Resolve("cuMemAlloc", 12000, kProcAddressPerThreadDefaultStream), "cuMemAlloc_v2");
}

TEST(ResolveProcAddress, UnknownAndTooOld) {
  EXPECT_EQ(ResolveProcAddress("cuNoSuchThing", 13000, 0).lookup, ProcLookup::kSymbolNotFound);
  EXPECT_EQ(ResolveProcAddress("cuLaunchKernelEx", 11000, 0).lookup,
            ProcLookup::kVersionNotSufficient);
}

TEST(DriverTables, EveryResolvedSymbolIsExported) {
  auto exports = DriverExports();
  ASSERT_TRUE(std::is_sorted(exports.begin(), exports.end()));
  for (const DriverSymbol& s : DriverSymbols()) {
    EXPECT_TRUE(std::binary_search(exports.begin(), exports.end(), s.symbol)) << s.symbol;
  }
}

}  // namespace
}  // namespace gpuslice::cuda_abi
