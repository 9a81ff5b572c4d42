#include "runtime/memory_plan.hpp"

#include <algorithm>
#include <numeric>

namespace minfer {

static uint64_t align_up(uint64_t x) { return (x + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

ArenaPlan plan_arena(const std::vector<Lifetime> &req) {
  ArenaPlan plan;
  plan.offsets.assign(req.size(), 0);
  std::vector<size_t> order(req.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return req[a].bytes > req[b].bytes; });

  struct Placed { uint64_t begin, end; size_t idx; };
  std::vector<Placed> placed;
  for (size_t i : order) {
    const uint64_t size = align_up(std::max<uint64_t>(req[i].bytes, 1));
    plan.unshared += size;
    // Ranges already taken by tensors alive at the same time, sorted by offset.
    std::vector<Placed> clash;
    for (const auto &p : placed)
      if (!(req[p.idx].last < req[i].first || req[i].last < req[p.idx].first)) clash.push_back(p);
    std::sort(clash.begin(), clash.end(), [](const Placed &a, const Placed &b) { return a.begin < b.begin; });
    uint64_t offset = 0;
    for (const auto &c : clash) {
      if (offset + size <= c.begin) break;
      offset = std::max(offset, c.end);
    }
    plan.offsets[i] = offset;
    placed.push_back({offset, offset + size, i});
    plan.size = std::max(plan.size, offset + size);
  }
  return plan;
}

}  // namespace minfer
