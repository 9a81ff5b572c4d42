// core/runtime/generator.hpp — feeding tokens through a model's session: prefill in chunks of
// the graph's batch size, then one token at a time, tracking positions in the KV cache.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "models/model.hpp"
#include "runtime/session.hpp"

namespace minfer {

class Generator {
 public:
  // The model is built for one sequence (max_seqs 1); the batched session runs many.
  Generator(const models::Model &model, Session &session);

  // Runs tokens (any count) after those already fed; returns the logits after the last one
  // (n_vocab floats). With a model built with all_logits, every token's logits, in order. The
  // vector is the generator's own, overwritten by the next feed (a decode step then costs one
  // copy of the logits, straight from the backend, and no allocation).
  const std::vector<float> &feed(const std::vector<int32_t> &tokens);

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return model_.opts.n_ctx; }
  void reset() { n_past_ = 0; }  // start a new sequence (old cache rows are overwritten)
  // Keeps the first n positions of the sequence and forgets the rest (n <= n_past).
  void rewind(int64_t n) { n_past_ = std::clamp<int64_t>(n, 0, n_past_); }

 private:
  const models::Model &model_;
  Session &session_;
  int64_t n_past_ = 0;
  std::vector<float> logits_;
  std::vector<int32_t> identity_pages_;  // the page table of slot 0: pages 0, 1, 2, ...
};

}  // namespace minfer
