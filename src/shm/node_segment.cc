#include "shm/node_segment.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>

namespace gpuslice {
namespace {

constexpr char kFileName[] = "node.v1";
static_assert(kNodeSegmentVersion == 1, "rename kFileName with the version");

static_assert(std::atomic_ref<uint64_t>::is_always_lock_free,
              "readers load words of a read-only mapping: plain loads only");

// The seqlock guards every byte from `daemon_pid` to the end, as 8-byte words.
constexpr size_t kPayloadOffset = offsetof(NodeSegmentLayout, daemon_pid);
constexpr size_t kPayloadWords = (sizeof(NodeSegmentLayout) - kPayloadOffset) / 8;
static_assert(kPayloadOffset % 8 == 0 && offsetof(NodeSegmentLayout, seq) < kPayloadOffset);

std::string Errno(const std::string& what) { return what + ": " + strerror(errno); }

uint64_t* Words(NodeSegmentLayout* s) {
  return reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(s) + kPayloadOffset);
}
const uint64_t* Words(const NodeSegmentLayout* s) {
  return reinterpret_cast<const uint64_t*>(reinterpret_cast<const char*>(s) + kPayloadOffset);
}

std::atomic_ref<uint64_t> SeqOf(const NodeSegmentLayout* s) {
  return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(s->seq));
}

template <size_t N>
void CopyString(char (&to)[N], const std::string& from) {
  memset(to, 0, N);
  memcpy(to, from.data(), std::min(from.size(), N - 1));
}

template <size_t N>
std::string StringOf(const char (&from)[N]) {
  return {from, strnlen(from, N)};
}

NodeGpuStatus ToLayout(const NodeGpu& g) {
  NodeGpuStatus s{};
  s.index = g.index;
  s.valid = g.valid ? 1 : 0;
  CopyString(s.uuid, g.uuid);
  CopyString(s.name, g.name);
  s.memory_total_bytes = g.memory_total_bytes;
  s.memory_used_bytes = g.memory_used_bytes;
  s.memory_free_bytes = g.memory_free_bytes;
  s.sm_utilization_percent = g.sm_utilization_percent;
  s.memory_utilization_percent = g.memory_utilization_percent;
  s.power_draw_mw = g.power_draw_mw;
  s.power_limit_mw = g.power_limit_mw;
  s.temperature_c = g.temperature_c;
  s.sm_clock_mhz = g.sm_clock_mhz;
  s.compute_mode = g.compute_mode;
  s.mps = static_cast<uint32_t>(g.mps);
  s.sampled_ns = g.sampled_ns;
  s.read_failed = g.read_failed ? 1 : 0;
  return s;
}

NodeGpu FromLayout(const NodeGpuStatus& s) {
  NodeGpu g;
  g.index = s.index;
  g.valid = s.valid != 0;
  g.uuid = StringOf(s.uuid);
  g.name = StringOf(s.name);
  g.memory_total_bytes = s.memory_total_bytes;
  g.memory_used_bytes = s.memory_used_bytes;
  g.memory_free_bytes = s.memory_free_bytes;
  g.sm_utilization_percent = s.sm_utilization_percent;
  g.memory_utilization_percent = s.memory_utilization_percent;
  g.power_draw_mw = s.power_draw_mw;
  g.power_limit_mw = s.power_limit_mw;
  g.temperature_c = s.temperature_c;
  g.sm_clock_mhz = s.sm_clock_mhz;
  g.compute_mode = s.compute_mode;
  g.mps = s.mps <= static_cast<uint32_t>(NodeMps::kRestarting) ? static_cast<NodeMps>(s.mps)
                                                               : NodeMps::kOff;
  g.sampled_ns = s.sampled_ns;
  g.read_failed = s.read_failed != 0;
  return g;
}

// Creates `dir` as the group segments' directory is created (GroupSegment:
// 01777, members of one pod may run as different users).
Status MakeDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 01777) == 0) {
    chmod(dir.c_str(), 01777);
    return Status::Ok();
  }
  if (errno == EEXIST) return Status::Ok();
  return Unavailable(Errno("cannot create " + dir));
}

const Clock& RealClock() {
  static const auto* clock = new MonotonicClock;  // never destroyed
  return *clock;
}

}  // namespace

// ---- writer ----

std::string NodeSegmentWriter::PathFor(const std::string& dir) { return dir + "/" + kFileName; }

StatusOr<std::unique_ptr<NodeSegmentWriter>> NodeSegmentWriter::Create(const std::string& dir,
                                                                       pid_t pid,
                                                                       const Clock& clock) {
  GS_RETURN_IF_ERROR(MakeDir(dir));
  const std::string path = PathFor(dir);
  const std::string tmp = dir + "/." + kFileName + ".tmp." + std::to_string(getpid());
  unlink(tmp.c_str());  // a leftover of a crashed daemon with our pid
  const int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Unavailable(Errno("cannot create " + tmp));
  auto fail = [&](Status s) {
    close(fd);
    unlink(tmp.c_str());
    return s;
  };
  if (fchmod(fd, 0644) != 0) return fail(Unavailable(Errno("cannot chmod " + tmp)));
  if (ftruncate(fd, sizeof(NodeSegmentLayout)) != 0) {
    return fail(Unavailable(Errno("cannot size " + tmp)));
  }
  void* p = mmap(nullptr, sizeof(NodeSegmentLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail(Unavailable(Errno("cannot map " + tmp)));
  auto* layout = static_cast<NodeSegmentLayout*>(p);
  // Nobody else can see the file yet: plain writes.
  memset(static_cast<void*>(layout), 0, sizeof(*layout));
  layout->header.magic = kNodeSegmentMagic;
  layout->header.version = kNodeSegmentVersion;
  layout->header.size = sizeof(NodeSegmentLayout);
  std::unique_ptr<NodeSegmentWriter> writer(new NodeSegmentWriter(path, layout, pid, clock));
  writer->Publish({});
  // The mapping outlives the descriptor; the rename publishes a whole file.
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = Unavailable(Errno("cannot rename " + tmp + " to " + path));
    writer.reset();  // unmaps
    return fail(std::move(s));
  }
  close(fd);
  return writer;
}

NodeSegmentWriter::NodeSegmentWriter(std::string path, NodeSegmentLayout* layout, pid_t pid,
                                     const Clock& clock)
    : path_(std::move(path)), layout_(layout), pid_(pid), clock_(clock) {}

NodeSegmentWriter::~NodeSegmentWriter() { munmap(layout_, sizeof(NodeSegmentLayout)); }

void NodeSegmentWriter::Publish(const std::vector<NodeGpu>& gpus) {
  MutexLock lock(mu_);
  const size_t n = std::min<size_t>(gpus.size(), kNodeMaxGpus);
  shadow_.daemon_pid = pid_;
  shadow_.gpu_count = static_cast<uint32_t>(n);
  shadow_.updated_ns = clock_.NowNs();
  shadow_.updates += 1;
  for (size_t i = 0; i < kNodeMaxGpus; ++i) {
    shadow_.gpus[i] = i < n ? ToLayout(gpus[i]) : NodeGpuStatus{};
  }
  WriteLocked();
}

void NodeSegmentWriter::MarkStopped() {
  MutexLock lock(mu_);
  shadow_.daemon_pid = 0;
  shadow_.updated_ns = clock_.NowNs();
  shadow_.updates += 1;
  WriteLocked();
}

void NodeSegmentWriter::WriteLocked() {
  // A seqlock writer without fences (ThreadSanitizer models no fences): odd,
  // then the words as release stores (none can become visible before the odd
  // word), then even (release).
  std::atomic_ref<uint64_t> seq = SeqOf(layout_);
  const uint64_t s = seq.load(std::memory_order_relaxed);
  seq.store(s + 1, std::memory_order_relaxed);
  uint64_t* to = Words(layout_);
  const auto* from = reinterpret_cast<const char*>(&shadow_) + kPayloadOffset;
  for (size_t i = 0; i < kPayloadWords; ++i) {
    uint64_t w = 0;
    memcpy(&w, from + i * 8, 8);
    std::atomic_ref<uint64_t>(to[i]).store(w, std::memory_order_release);
  }
  seq.store(s + 2, std::memory_order_release);
}

// ---- reader ----

struct NodeSegmentReader::Mapping {
  const NodeSegmentLayout* layout = nullptr;
  dev_t dev = 0;
  ino_t ino = 0;
  uid_t uid = 0;

  ~Mapping() {
    if (layout != nullptr) munmap(const_cast<NodeSegmentLayout*>(layout), sizeof(*layout));
  }
};

StatusOr<std::unique_ptr<NodeSegmentReader>> NodeSegmentReader::Open(const std::string& dir,
                                                                     Options options) {
  const std::string path = NodeSegmentWriter::PathFor(dir);
  GS_ASSIGN_OR_RETURN(std::unique_ptr<Mapping> mapping, Map(path, options.owner));
  if (options.clock == nullptr) options.clock = &RealClock();
  options.max_attempts = std::max(options.max_attempts, 1);
  return std::unique_ptr<NodeSegmentReader>(
      new NodeSegmentReader(path, std::move(options), std::move(mapping)));
}

StatusOr<std::unique_ptr<NodeSegmentReader::Mapping>> NodeSegmentReader::Map(
    const std::string& path, std::optional<uid_t> owner) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return NotFound("no node segment at " + path +
                      " (gpusliced has not run with this directory)");
    }
    return Unavailable(Errno("cannot open " + path));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) return Unavailable(Errno("cannot stat " + path));
  if (owner && st.st_uid != *owner) {
    return PermissionDenied(path + " is owned by uid " + std::to_string(st.st_uid) +
                            ", not by the daemon's uid " + std::to_string(*owner) +
                            "; not trusted");
  }
  NodeSegmentHeader h{};
  if (static_cast<size_t>(st.st_size) < sizeof(h) || pread(fd, &h, sizeof(h), 0) != sizeof(h)) {
    return FailedPrecondition(path + " is not a node segment: " + std::to_string(st.st_size) +
                              " bytes, too short for a header");
  }
  if (h.magic != kNodeSegmentMagic) {
    return FailedPrecondition(path + " is not a node segment: bad magic");
  }
  if (h.version != kNodeSegmentVersion) {
    return FailedPrecondition(path + " has node segment layout version " +
                              std::to_string(h.version) + "; this build reads version " +
                              std::to_string(kNodeSegmentVersion));
  }
  if (h.size != sizeof(NodeSegmentLayout) ||
      static_cast<size_t>(st.st_size) != sizeof(NodeSegmentLayout)) {
    return FailedPrecondition(path + " is not a node segment of this layout: header size " +
                              std::to_string(h.size) + ", file size " + std::to_string(st.st_size) +
                              ", expected " + std::to_string(sizeof(NodeSegmentLayout)));
  }
  void* p = mmap(nullptr, sizeof(NodeSegmentLayout), PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Unavailable(Errno("cannot map " + path));
  auto m = std::make_unique<Mapping>();
  m->layout = static_cast<const NodeSegmentLayout*>(p);
  m->dev = st.st_dev;
  m->ino = st.st_ino;
  m->uid = st.st_uid;
  return m;
}

NodeSegmentReader::NodeSegmentReader(std::string path, Options options,
                                     std::unique_ptr<Mapping> mapping)
    : path_(std::move(path)), options_(std::move(options)), mapping_(std::move(mapping)) {}

NodeSegmentReader::~NodeSegmentReader() = default;

StatusOr<NodeStatus> NodeSegmentReader::Read() {
  MutexLock lock(mu_);
  StatusOr<NodeStatus> status = ReadMapping(*mapping_);
  if (status.ok() && !status->stale) return status;
  // Stale or stuck mid-write: a newer daemon may have replaced the file.
  struct stat st {};
  if (stat(path_.c_str(), &st) != 0 || (st.st_dev == mapping_->dev && st.st_ino == mapping_->ino)) {
    return status;
  }
  StatusOr<std::unique_ptr<Mapping>> fresh = Map(path_, options_.owner);
  if (!fresh.ok()) return status;  // being replaced, or not ours: keep what we have
  mapping_ = std::move(*fresh);
  return ReadMapping(*mapping_);
}

StatusOr<NodeStatus> NodeSegmentReader::ReadMapping(const Mapping& m) const {
  const NodeSegmentLayout* layout = m.layout;
  std::atomic_ref<uint64_t> seq = SeqOf(layout);
  NodeSegmentLayout copy{};
  auto* to = reinterpret_cast<char*>(&copy) + kPayloadOffset;
  const uint64_t* from = Words(layout);
  for (int attempt = 1;; ++attempt) {
    const uint64_t s1 = seq.load(std::memory_order_acquire);
    if (s1 % 2 == 0) {
      // Acquire loads: a word from an update that began after s1 carries
      // that update's odd word with it, so the second load below sees it.
      for (size_t i = 0; i < kPayloadWords; ++i) {
        const uint64_t w = std::atomic_ref<uint64_t>(const_cast<uint64_t&>(from[i]))
                               .load(std::memory_order_acquire);
        memcpy(to + i * 8, &w, 8);
      }
      if (seq.load(std::memory_order_relaxed) == s1) break;
    }
    if (attempt >= options_.max_attempts) {
      return Unavailable(path_ + " stayed mid-update for " + std::to_string(attempt) +
                         " reads (its writer died while writing?)");
    }
    if (options_.on_retry) options_.on_retry(attempt);
    if (attempt % 16 == 0) sched_yield();  // let a descheduled writer finish
  }
  if (copy.gpu_count > kNodeMaxGpus) {
    return FailedPrecondition(path_ + " claims " + std::to_string(copy.gpu_count) +
                              " GPUs (at most " + std::to_string(kNodeMaxGpus) + ")");
  }
  NodeStatus status;
  status.daemon_pid = copy.daemon_pid;
  status.updated_ns = copy.updated_ns;
  status.updates = copy.updates;
  status.age_ns = std::max<int64_t>(0, options_.clock->NowNs() - copy.updated_ns);
  status.stale = copy.daemon_pid == 0 || status.age_ns > kNodeStaleNs;
  status.owner_uid = m.uid;
  status.gpus.reserve(copy.gpu_count);
  for (uint32_t i = 0; i < copy.gpu_count; ++i) status.gpus.push_back(FromLayout(copy.gpus[i]));
  return status;
}

}  // namespace gpuslice
