// core/sampling/end_hold.hpp — a reply that may not end yet: the end-of-generation tokens are
// refused until `min_tokens` tokens have been chosen (vLLM's min_tokens), or always
// (ignore_eos: the reply runs to max_tokens or the context), on top of any other constraint.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sampling/json_constraint.hpp"

namespace minfer::sampling {

inline constexpr int64_t kNeverEnd = INT64_MAX;  // min_tokens for ignore_eos

// inner: the request's other constraint (a schema, tool calls), or null. Where inner allows
// only an end that is still held (a finished JSON value), nothing is allowed and the reply
// ends at inner's dead end, as any dead end does.
std::shared_ptr<const TokenConstraint> hold_end(std::shared_ptr<const TokenConstraint> inner, std::vector<int32_t> end_tokens,
                                                int64_t min_tokens);

}  // namespace minfer::sampling
