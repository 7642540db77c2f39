// A shared library that does nothing: a real file the add-path tests can put in
// LD_PRELOAD, so the loader of every child finds it and stays silent.
extern "C" __attribute__((visibility("default"))) int gpuslice_addpath_test_noop() { return 0; }
