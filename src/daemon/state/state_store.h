// StateStore: the daemon's durable records (DESIGN.md section 4,
// "Durability"). Each record is one JSON document in a file of the state
// directory, replaced atomically: written to a temporary file, fsync'ed,
// renamed over the old one, and the directory fsync'ed, so after a crash or
// SIGKILL a record is either the old document or the new one, never a mix.
//
// File format (docs/daemon.md, "State"):
//   {"format": "gpuslice-state", "version": 1, "record": "<name>",
//    "saved_at_ns": <CLOCK_REALTIME>, "data": <the record>}
// A file that is not that (truncated, another program's, another version) is
// never half-read: Load moves it aside to "<name>.json.bad" (replacing an
// older one) and says so, so the next Save starts clean and the evidence is
// kept for the operator.
//
// Failed saves (a full disk, a read-only or vanished directory; docs/errors.md
// "A full disk"): the previous document stays in place, the error goes back to
// the record's owner, and the store keeps each record's save health:
//  1. every failed save is counted (gpuslice_state_save_failures_total);
//  2. the first failure of a run of failures is logged
//     (event=state_save_failed), later ones are not; the first save that
//     works again is (event=state_saved_again failed_saves=N);
//  3. Stale(name) (gpuslice_state_record_stale) says the last save of the
//     record failed: the file is behind what its owner holds, and the owner
//     saves again on its next periodic step (each owner's header says where).
//
// Thread-safe: Save and Load may be called from any thread; saves of one
// record are serialised, so the last Save to return is the one on disk.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace gpuslice::daemon {

inline constexpr int kStateFormatVersion = 1;

class StateStore {
 public:
  // Uses `dir`, creating it (mode 0700, parents included) if needed.
  // kUnavailable naming the directory when it cannot be created or written.
  static StatusOr<std::unique_ptr<StateStore>> Open(std::string dir);

  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  const std::string& dir() const { return dir_; }
  // The file that holds record `name`.
  std::string PathOf(std::string_view name) const;

  // Replaces record `name` (1-64 of [a-z0-9_-]) with `data`, durably.
  // On error the previous document is still in place.
  Status Save(std::string_view name, const nlohmann::json& data);

  // Save with the data already serialised (one JSON value, e.g. built by
  // concatenating cached json::dump() texts), for large records saved often.
  // REQUIRES: `data_json` is one valid JSON value (not re-parsed here).
  Status SaveSerialized(std::string_view name, std::string_view data_json);

  // The data of record `name`. kNotFound when it was never saved (or was
  // removed); kFailedPrecondition when the file is unreadable as a record of
  // this format and version: the message names the problem and where the
  // file was moved.
  StatusOr<nlohmann::json> Load(std::string_view name);

  // Removes record `name` (no error if absent).
  Status Remove(std::string_view name);

  // Whether the last Save, SaveSerialized or Remove of `name` failed (rule 3).
  bool Stale(std::string_view name) const;
  // Failed saves of `name` since the store was opened (rule 1).
  uint64_t SaveFailures(std::string_view name) const;
  // Prometheus text: gpuslice_state_save_failures_total{record} (counter) and
  // gpuslice_state_record_stale{record} (gauge), per record saved so far.
  std::string FormatMetrics() const;

 private:
  explicit StateStore(std::string dir) : dir_(std::move(dir)) {}
  // Writes `text` as the file of record `name`: temporary file, fsync, rename, fsync dir.
  Status WriteAtomically(std::string_view name, const std::string& text);
  // Moves the bad file of `name` aside; returns the error that says so.
  Status Quarantine(std::string_view name, const std::string& problem) const;

  // Notes the outcome of one save of `name` (rules 1-3); returns `s`.
  Status Noted(std::string_view name, Status s);

  struct Health {
    uint64_t failures_total = 0;
    uint64_t streak = 0;  // failed saves since the last one that worked
  };

  std::string dir_;
  Mutex save_mu_;  // one Save at a time: temporary file names never collide
  mutable Mutex health_mu_;
  std::map<std::string, Health, std::less<>> health_ GUARDED_BY(health_mu_);
};

}  // namespace gpuslice::daemon
