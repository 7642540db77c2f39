// Allocate: the ShareScheduler's pure allocation of one GPU's time to its
// groups (DESIGN.md section 4, docs/scheduling.md "Allocation").
//
// Over a capacity K (basis points of the device; the whole device when at
// most one group is active), each tick:
//  1. a paused group gets nothing; an idle one (it launched nothing for a
//     second and waits for nothing) keeps kIdleGrantBp, outside K;
//  2. each other group can use up to a cap: its limit if it wants more (held
//     back by its grant or its turn within the last second, or new and
//     standing on its request), else what it ran (the larger of the last
//     second and the last 200 ms) x kUseHeadroom + kMarginBp, at most its
//     limit;
//  3. each first gets min(request x K / 10000, its cap); should the requests
//     add up to more than K, they are scaled down to fit;
//  4. the rest of K is water-filled by weight up to the caps.
// So grants never exceed limits and add up to at most K (idle grants aside):
// an unused request is lent at once and taken back the tick after its owner
// asks for it.
#pragma once

#include <cstdint>
#include <vector>

namespace gpuslice::control {

// What an idle group keeps (it gets its request back once it asks).
inline constexpr uint32_t kIdleGrantBp = 100;
// A group that does not want more is allotted what it ran x kUseHeadroom +
// kMarginBp, so that it is not held back by noise and can grow a little
// before it has to ask.
inline constexpr double kUseHeadroom = 1.1;
inline constexpr uint32_t kMarginBp = 100;

struct AllocationInput {
  uint32_t request_percent = 0;  // 0..100
  uint32_t limit_bp = 10000;     // 1..10000
  uint32_t weight = 1;           // 0 is taken as 1
  bool paused = false;
  bool idle = false;
  bool wanting = false;
  // New or resumed and not held back yet: its request stands whatever it ran.
  bool standing = false;
  uint32_t used_bp = 0;
  uint32_t used_fast_bp = 0;
};

// The grants (basis points), parallel to `groups`: 0 for a paused group, else
// 1..its limit. REQUIRES: capacity_bp <= 10000.
std::vector<uint32_t> Allocate(const std::vector<AllocationInput>& groups, uint32_t capacity_bp);

// Water-fills `room` (what each item may still take) by `weight` with
// `amount`: what each gets; the sum never exceeds `amount`.
std::vector<double> WaterFill(const std::vector<double>& room, const std::vector<double>& weight,
                              double amount);

}  // namespace gpuslice::control
