#include "control/allocation.h"

#include <algorithm>
#include <numeric>

namespace gpuslice::control {

std::vector<double> WaterFill(const std::vector<double>& room, const std::vector<double>& weight,
                              double amount) {
  std::vector<double> got(room.size(), 0);
  std::vector<size_t> order(room.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return room[a] * weight[b] < room[b] * weight[a]; });
  double weights = 0;
  for (double w : weight) weights += w;
  for (size_t k = 0; k < order.size() && amount > 0 && weights > 0; ++k) {
    const size_t i = order[k];
    const double level = amount / weights;  // per unit of weight
    if (room[i] <= level * weight[i]) {
      got[i] = room[i];
    } else {
      // Every item from here on is wider than the level: all get level x w.
      for (size_t j = k; j < order.size(); ++j) got[order[j]] = level * weight[order[j]];
      break;
    }
    amount -= got[i];
    weights -= weight[i];
  }
  return got;
}

std::vector<uint32_t> Allocate(const std::vector<AllocationInput>& groups, uint32_t capacity_bp) {
  const size_t n = groups.size();
  std::vector<double> base(n, 0);
  std::vector<double> room(n, 0);
  std::vector<double> weight(n, 0);
  double allotted = 0;
  for (size_t i = 0; i < n; ++i) {
    const AllocationInput& g = groups[i];
    if (g.paused || g.idle) continue;
    const auto limit = static_cast<double>(std::clamp<uint32_t>(g.limit_bp, 1, 10000));
    const double request =
        std::min<uint32_t>(g.request_percent, 100) * 100.0 * capacity_bp / 10000.0;
    double cap = std::max(g.used_bp, g.used_fast_bp) * kUseHeadroom + kMarginBp;
    if (g.wanting) cap = g.standing ? std::max(cap, request) : limit;
    cap = std::min(cap, limit);
    base[i] = std::min(request, cap);
    room[i] = cap - base[i];
    weight[i] = std::max<uint32_t>(g.weight, 1);
    allotted += base[i];
  }
  const auto capacity = static_cast<double>(capacity_bp);
  if (allotted > capacity) {
    for (double& b : base) b = b * capacity / allotted;
    allotted = capacity;
  }
  const std::vector<double> extra = WaterFill(room, weight, capacity - allotted);
  std::vector<uint32_t> grants(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const AllocationInput& g = groups[i];
    if (g.paused) continue;
    const uint32_t limit = std::clamp<uint32_t>(g.limit_bp, 1, 10000);
    const double grant = g.idle ? std::min(kIdleGrantBp, limit) : base[i] + extra[i];
    grants[i] = std::clamp<uint32_t>(static_cast<uint32_t>(grant), 1, limit);
  }
  return grants;
}

}  // namespace gpuslice::control
