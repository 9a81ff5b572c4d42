// core/runtime/generator.hpp — feeding tokens through a model's session: prefill in chunks of
// the graph's batch size, then one token at a time, tracking positions in the KV cache.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "models/model.hpp"
#include "runtime/session.hpp"

namespace minfer {

// The logits of a feed, in the generator's own host memory: valid until the next feed.
class Logits {
 public:
  Logits() = default;
  Logits(const float *data, size_t size) : data_(data), size_(size) {}
  const float *data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const float &operator[](size_t i) const { return data_[i]; }
  const float *begin() const { return data_; }
  const float *end() const { return data_ + size_; }
  operator std::vector<float>() const { return {begin(), end()}; }  // a copy that outlives the next feed

 private:
  const float *data_ = nullptr;
  size_t size_ = 0;
};

class Generator {
 public:
  // The model is built for one sequence (max_seqs 1); the batched session runs many.
  Generator(const models::Model &model, Session &session);

  // Runs tokens (any count) after those already fed; returns the logits after the last one
  // (n_vocab floats). With a model built with all_logits, every token's logits, in order. They
  // are in the generator's own memory, overwritten by the next feed: a decode step costs one
  // copy of the logits, straight from the backend into memory it reaches fastest (the
  // backend's own, Session::output_host_memory), and no allocation.
  Logits feed(const std::vector<int32_t> &tokens);

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return model_.opts.n_ctx; }
  void reset() { n_past_ = 0; }  // start a new sequence (old cache rows are overwritten)
  // Keeps the first n positions of the sequence and forgets the rest (n <= n_past).
  void rewind(int64_t n) { n_past_ = std::clamp<int64_t>(n, 0, n_past_); }

 private:
  const models::Model &model_;
  Session &session_;
  int64_t n_past_ = 0;
  HostMemory logits_;  // grows, never shrinks
  uint64_t logit_row_bytes_ = 0;  // one token's logits
  std::vector<int32_t> identity_pages_;  // the page table of slot 0: pages 0, 1, 2, ...
};

}  // namespace minfer
