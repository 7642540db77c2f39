// The node segment's costs (docs/daemon.md "Node segment"): how long a
// reader's consistent snapshot takes with the daemon idle and with a writer
// publishing as fast as it can (the worst case for retries), and how long
// one publication of 16 GPUs takes. Prints a table.
//
//   gpuslice-bench-node-segment [--reads N] [--dir DIR]
#include "shm/node_segment.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"

namespace {

using gpuslice::NodeGpu;
using gpuslice::NodeSegmentReader;
using gpuslice::NodeSegmentWriter;

std::vector<NodeGpu> Gpus(uint64_t k) {
  std::vector<NodeGpu> gpus(gpuslice::kNodeMaxGpus);
  for (size_t i = 0; i < gpus.size(); ++i) {
    gpus[i].index = static_cast<uint32_t>(i);
    gpus[i].valid = true;
    gpus[i].uuid = "GPU-" + std::to_string(i) + "-bench";
    gpus[i].name = "NVIDIA H100 80GB HBM3";
    gpus[i].memory_total_bytes = 80ull << 30;
    gpus[i].memory_used_bytes = k;
  }
  return gpus;
}

struct Row {
  std::string what;
  std::vector<int64_t> ns;
  uint64_t retries = 0;
};

void Print(Row& r) {
  std::sort(r.ns.begin(), r.ns.end());
  auto at = [&](double q) {
    return static_cast<double>(
               r.ns[static_cast<size_t>(q * static_cast<double>(r.ns.size() - 1))]) /
           1000.0;
  };
  printf("| %-34s | %8zu | %8.2f | %8.2f | %8.2f | %8.2f | %8llu |\n", r.what.c_str(), r.ns.size(),
         at(0.5), at(0.99), at(0.999), static_cast<double>(r.ns.back()) / 1000.0,
         static_cast<unsigned long long>(r.retries));
}

int Run(int argc, char** argv) {
  CLI::App app{"node segment read/publish costs"};
  int reads = 200'000;
  std::string dir = "/dev/shm/gpuslice-bench-node." + std::to_string(getpid());
  app.add_option("--reads", reads, "snapshots per row");
  app.add_option("--dir", dir, "directory of the segment (removed at the end)");
  CLI11_PARSE(app, argc, argv);

  gpuslice::MonotonicClock clock;
  auto writer = NodeSegmentWriter::Create(dir, getpid(), clock);
  if (!writer.ok()) {
    fprintf(stderr, "%s\n", writer.status().ToString().c_str());
    return 1;
  }
  uint64_t retries = 0;
  auto reader = NodeSegmentReader::Open(
      dir, {.clock = &clock, .max_attempts = 1'000'000, .owner = {}, .on_retry = [&](int) {
              ++retries;
            }});
  if (!reader.ok()) {
    fprintf(stderr, "%s\n", reader.status().ToString().c_str());
    return 1;
  }
  (*writer)->Publish(Gpus(0));

  auto measure_reads = [&](const std::string& what) {
    Row r{what, {}, 0};
    r.ns.reserve(static_cast<size_t>(reads));
    retries = 0;
    for (int i = 0; i < reads; ++i) {
      const int64_t t0 = gpuslice::MonotonicNs();
      auto s = (*reader)->Read();
      const int64_t t1 = gpuslice::MonotonicNs();
      if (!s.ok() || s->gpus.size() != gpuslice::kNodeMaxGpus) {
        fprintf(stderr, "read failed: %s\n",
                s.ok() ? "GPUs missing" : s.status().ToString().c_str());
        std::exit(1);
      }
      r.ns.push_back(t1 - t0);
    }
    r.retries = retries;
    return r;
  };

  Row publish{"publish (16 GPUs)", {}, 0};
  for (int i = 0; i < reads / 10; ++i) {
    const auto gpus = Gpus(static_cast<uint64_t>(i));
    const int64_t t0 = gpuslice::MonotonicNs();
    (*writer)->Publish(gpus);
    publish.ns.push_back(gpuslice::MonotonicNs() - t0);
  }

  Row idle = measure_reads("read, writer idle");
  std::atomic<bool> stop{false};
  uint64_t published = 0;
  std::thread busy([&] {
    const auto gpus = Gpus(1);
    while (!stop.load(std::memory_order_relaxed)) {
      (*writer)->Publish(gpus);
      ++published;
    }
  });
  Row contended = measure_reads("read, writer publishing flat out");
  stop = true;
  busy.join();

  printf("node segment: %zu bytes, %d GPUs, %u hardware threads\n\n",
         sizeof(gpuslice::NodeSegmentLayout), gpuslice::kNodeMaxGpus,
         std::thread::hardware_concurrency());
  printf("| %-34s | %8s | %8s | %8s | %8s | %8s | %8s |\n", "operation", "count", "p50 us",
         "p99 us", "p99.9 us", "max us", "retries");
  printf("|%s|%s|%s|%s|%s|%s|%s|\n", std::string(36, '-').c_str(), std::string(10, '-').c_str(),
         std::string(10, '-').c_str(), std::string(10, '-').c_str(), std::string(10, '-').c_str(),
         std::string(10, '-').c_str(), std::string(10, '-').c_str());
  Print(publish);
  Print(idle);
  Print(contended);
  printf("\n(%llu publications during the contended reads)\n",
         static_cast<unsigned long long>(published));
  writer->reset();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    fprintf(stderr, "gpuslice-bench-node-segment: %s\n", e.what());
    return 1;
  }
}
