// core/runtime/memory_plan.hpp — offsets of tensors inside one arena, from their lifetimes.
//
// Two tensors share bytes only when their lifetimes [first, last] (in step positions) do not
// overlap. Greedy by size, largest first, lowest fitting offset: simple and close to optimal
// for the chain-shaped graphs of language models.
#pragma once

#include <cstdint>
#include <vector>

namespace minfer {

struct Lifetime {
  uint64_t bytes = 0;
  int64_t first = 0;  // position that writes it
  int64_t last = 0;   // last position that reads it (inclusive)
};

struct ArenaPlan {
  std::vector<uint64_t> offsets;  // per request, aligned
  uint64_t size = 0;              // arena bytes needed
  uint64_t unshared = 0;          // bytes if nothing were shared (for reports)
};

inline constexpr uint64_t kArenaAlignment = 256;  // fits every vector width and CUDA's 256 B

ArenaPlan plan_arena(const std::vector<Lifetime> &requests);

}  // namespace minfer
