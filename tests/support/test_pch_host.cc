// The translation unit that builds tests/support/test_pch.h into the
// precompiled header every gpuslice_test() binary reuses (top-level
// CMakeLists.txt). Empty on purpose: the executable exists so that the PCH is
// compiled with an executable's flags (-fPIE), as the test binaries are;
// gtest_main gives it its main().
