// The precompiled header of every gpuslice_test() binary (top-level
// CMakeLists.txt, target gpuslice_test_pch): the third-party and standard
// headers most test files include, parsed once per build instead of once per
// test file (docs/sanitizers.md). It is force-included (`-include`) before
// each test source, so:
//   - only headers whose meaning no test changes with a macro of its own:
//     gtest, gmock, nlohmann/json and the standard library; nothing of ours
//     (a change to one of our headers would rebuild every test);
//   - a test still includes what it uses: this list is a build-speed detail,
//     and a build without it (GPUSLICE_TEST_PCH=OFF) must compile.
// Extra -D options on a test target are fine (neither gcc nor clang checks a
// macro these headers never look at); different code-generation options
// (-fPIC against -fPIE, another sanitizer) are not, which is why the PCH is
// built by an executable that links what gpuslice_test() links.
#ifndef GPUSLICE_TESTS_SUPPORT_TEST_PCH_H_
#define GPUSLICE_TESTS_SUPPORT_TEST_PCH_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#endif  // GPUSLICE_TESTS_SUPPORT_TEST_PCH_H_
