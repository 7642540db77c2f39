// ThreadSanitizer suppressions for the tests that run gRPC: Debian's gRPC
// and protobuf are not built with TSan, so memory they hand between threads
// (gpr_malloc'd buffers, messages deserialised on a server thread) looks
// racy to it. Only reports with a gRPC or protobuf frame are suppressed;
// our own code's races are still reported. Without TSan the function is
// never called.
extern "C" const char* __tsan_default_suppressions();  // NOLINT(bugprone-reserved-identifier)

extern "C" const char* __tsan_default_suppressions() {  // NOLINT(bugprone-reserved-identifier)
  return "race:grpc\n"
         "race:google::protobuf\n"
         "race:libgrpc\n"
         "race:libgpr\n"
         "race:libprotobuf\n"
         "race:absl\n"
         "race:libabsl\n"
         "called_from_lib:libgrpc.so\n"
         "called_from_lib:libgrpc++.so\n";
}
