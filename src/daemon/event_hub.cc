#include "daemon/event_hub.h"

#include <vector>

namespace gpuslice::daemon {

uint64_t EventHub::Subscribe(Callback callback) {
  MutexLock lock(mu_);
  const uint64_t id = next_subscriber_++;
  subscribers_.emplace(id, std::move(callback));
  return id;
}

void EventHub::Unsubscribe(uint64_t id) {
  MutexLock lock(mu_);
  subscribers_.erase(id);
}

void EventHub::Publish(std::string_view type, std::string_view data) {
  std::vector<Callback> targets;
  std::shared_ptr<const std::string> event;
  {
    MutexLock lock(mu_);
    event = std::make_shared<const std::string>("id: " + std::to_string(next_event_++) +
                                                "\nevent: " + std::string(type) +
                                                "\ndata: " + std::string(data) + "\n\n");
    targets.reserve(subscribers_.size());
    for (const auto& [id, cb] : subscribers_) targets.push_back(cb);
  }
  for (const auto& cb : targets) cb(event);
}

size_t EventHub::SubscriberCount() const {
  MutexLock lock(mu_);
  return subscribers_.size();
}

}  // namespace gpuslice::daemon
