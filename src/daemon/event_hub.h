// EventHub: fan-out of server-sent events. Publishers hand over one
// formatted event; every subscriber's callback gets the same shared string.
//
// Thread-safe. Callbacks run on the publishing thread and must not block
// (the HTTP layer posts the event to the connection's own executor).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/thread_annotations.h"

namespace gpuslice::daemon {

class EventHub {
 public:
  using Callback = std::function<void(std::shared_ptr<const std::string> event)>;

  uint64_t Subscribe(Callback callback);
  void Unsubscribe(uint64_t id);
  // Formats "id: <n>\nevent: <type>\ndata: <data>\n\n" and delivers it.
  // REQUIRES: `data` has no newline (one JSON line).
  void Publish(std::string_view type, std::string_view data);
  size_t SubscriberCount() const;

 private:
  mutable Mutex mu_;
  std::map<uint64_t, Callback> subscribers_ GUARDED_BY(mu_);
  uint64_t next_subscriber_ GUARDED_BY(mu_) = 1;
  uint64_t next_event_ GUARDED_BY(mu_) = 1;
};

}  // namespace gpuslice::daemon
