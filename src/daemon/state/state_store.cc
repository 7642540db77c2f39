#include "daemon/state/state_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/clock.h"
#include "common/log.h"

namespace gpuslice::daemon {
namespace {

constexpr char kFormat[] = "gpuslice-state";

std::string Errno(const std::string& what) { return what + ": " + strerror(errno); }

// `doc[key]` if it is a string, else "".
std::string StringField(const nlohmann::json& doc, const char* key) {
  const auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

// Writes all of `text` to `fd`.
bool WriteAll(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

Status SyncDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Unavailable(Errno("cannot open " + dir));
  const int rc = fsync(fd);
  close(fd);
  return rc == 0 ? Status::Ok() : Unavailable(Errno("cannot fsync " + dir));
}

}  // namespace

StatusOr<std::unique_ptr<StateStore>> StateStore::Open(std::string dir) {
  if (dir.empty()) return InvalidArgument("the state directory is empty");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable("cannot create state directory " + dir + ": " + ec.message());
  chmod(dir.c_str(), 0700);
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return Unavailable(Errno("cannot write state directory " + dir));
  }
  return std::unique_ptr<StateStore>(new StateStore(std::move(dir)));
}

std::string StateStore::PathOf(std::string_view name) const {
  return dir_ + "/" + std::string(name) + ".json";
}

Status StateStore::Save(std::string_view name, const nlohmann::json& data) {
  if (!ValidName(name)) return InvalidArgument("bad state record name '" + std::string(name) + "'");
  const nlohmann::json doc = {{"format", kFormat},
                              {"version", kStateFormatVersion},
                              {"record", std::string(name)},
                              {"saved_at_ns", RealtimeNs()},
                              {"data", data}};
  return Noted(name, WriteAtomically(name, doc.dump() + "\n"));
}

Status StateStore::SaveSerialized(std::string_view name, std::string_view data_json) {
  if (!ValidName(name)) return InvalidArgument("bad state record name '" + std::string(name) + "'");
  const nlohmann::json head = {{"format", kFormat},
                               {"version", kStateFormatVersion},
                               {"record", std::string(name)},
                               {"saved_at_ns", RealtimeNs()}};
  std::string text = head.dump();  // {...}: reopen it to append the data
  text.pop_back();
  text.reserve(text.size() + data_json.size() + 16);
  text += ",\"data\":";
  text += data_json;
  text += "}\n";
  return Noted(name, WriteAtomically(name, text));
}

Status StateStore::WriteAtomically(std::string_view name, const std::string& text) {
  const std::string path = PathOf(name);
  const std::string tmp = path + ".tmp";
  MutexLock lock(save_mu_);
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable(Errno("cannot create " + tmp));
  const bool written = WriteAll(fd, text) && fsync(fd) == 0;
  const int saved_errno = errno;
  close(fd);
  if (!written) {
    unlink(tmp.c_str());
    errno = saved_errno;
    return Unavailable(Errno("cannot write " + tmp));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = Unavailable(Errno("cannot rename " + tmp + " to " + path));
    unlink(tmp.c_str());
    return s;
  }
  return SyncDir(dir_);
}

Status StateStore::Noted(std::string_view name, Status s) {
  uint64_t streak = 0;
  {
    MutexLock lock(health_mu_);
    auto it = health_.find(name);
    if (it == health_.end()) it = health_.emplace(std::string(name), Health{}).first;
    Health& h = it->second;
    if (s.ok()) {
      streak = h.streak;
      h.streak = 0;
    } else {
      ++h.failures_total;
      streak = ++h.streak;
    }
  }
  if (!s.ok() && streak == 1) {
    GS_LOG(kError, "gpusliced",
           "event=state_save_failed record=%s error=\"%s\" action=kept_previous_file "
           "retry=owner_saves_again (logged once until a save works)",
           std::string(name).c_str(), s.message().c_str());
  } else if (s.ok() && streak > 0) {
    GS_LOG(kInfo, "gpusliced", "event=state_saved_again record=%s failed_saves=%llu",
           std::string(name).c_str(), static_cast<unsigned long long>(streak));
  }
  return s;
}

bool StateStore::Stale(std::string_view name) const {
  MutexLock lock(health_mu_);
  auto it = health_.find(name);
  return it != health_.end() && it->second.streak > 0;
}

uint64_t StateStore::SaveFailures(std::string_view name) const {
  MutexLock lock(health_mu_);
  auto it = health_.find(name);
  return it == health_.end() ? 0 : it->second.failures_total;
}

std::string StateStore::FormatMetrics() const {
  MutexLock lock(health_mu_);
  std::string failures =
      "# HELP gpuslice_state_save_failures_total Saves of a durable record that failed (the "
      "previous file was kept; the record's owner saves again).\n"
      "# TYPE gpuslice_state_save_failures_total counter\n";
  std::string stale =
      "# HELP gpuslice_state_record_stale 1 while the last save of a record failed: the file is "
      "behind the daemon.\n# TYPE gpuslice_state_record_stale gauge\n";
  for (const auto& [name, h] : health_) {
    failures += "gpuslice_state_save_failures_total{record=\"" + name + "\"} " +
                std::to_string(h.failures_total) + "\n";
    stale += "gpuslice_state_record_stale{record=\"" + name + "\"} " +
             std::to_string(h.streak > 0 ? 1 : 0) + "\n";
  }
  return failures + stale;
}

Status StateStore::Quarantine(std::string_view name, const std::string& problem) const {
  const std::string path = PathOf(name);
  const std::string bad = path + ".bad";
  if (rename(path.c_str(), bad.c_str()) != 0) {
    return FailedPrecondition(path + ": " + problem +
                              " (and it cannot be moved aside: " + strerror(errno) + ")");
  }
  return FailedPrecondition(path + ": " + problem + "; moved to " + bad);
}

StatusOr<nlohmann::json> StateStore::Load(std::string_view name) {
  if (!ValidName(name)) return InvalidArgument("bad state record name '" + std::string(name) + "'");
  const std::string path = PathOf(name);
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return NotFound("no state record " + path);
    return Unavailable(Errno("cannot read " + path));
  }
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Quarantine(name, "not a complete JSON document (truncated?)");
  if (!doc.is_object() || StringField(doc, "format") != kFormat) {
    return Quarantine(name, "not a gpuslice state record");
  }
  const auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() ||
      version->get<int>() != kStateFormatVersion) {
    return Quarantine(name, "state format version " +
                                (version == doc.end() ? std::string("missing") : version->dump()) +
                                ", this daemon reads version " +
                                std::to_string(kStateFormatVersion));
  }
  if (StringField(doc, "record") != name || !doc.contains("data")) {
    return Quarantine(
        name, "holds record '" + StringField(doc, "record") + "', not '" + std::string(name) + "'");
  }
  return doc.at("data");
}

Status StateStore::Remove(std::string_view name) {
  if (!ValidName(name)) return InvalidArgument("bad state record name '" + std::string(name) + "'");
  const std::string path = PathOf(name);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Noted(name, Unavailable(Errno("cannot remove " + path)));
  }
  return Noted(name, SyncDir(dir_));
}

}  // namespace gpuslice::daemon
