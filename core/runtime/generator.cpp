#include "runtime/generator.hpp"

#include <cstring>

#include "common/error.hpp"

namespace minfer {

Generator::Generator(const models::Model &model, Session &session) : model_(model), session_(session) {
  const Tensor &logits = model.graph.tensor(model.graph.find_tensor(models::Model::kLogits));
  if (logits.token_dim < 0) throw Error("Generator: the model's logits have no token dim");
  logit_row_bytes_ = logits.n_bytes() / uint64_t(logits.shape[size_t(logits.token_dim)]);
  if (model.opts.max_seqs != 1)
    throw Error("Generator runs one sequence; this model is built for " + std::to_string(model.opts.max_seqs) + " (use the batched session)");
  if (model.opts.kv_pages < model.opts.pages_per_seq())
    throw Error("kv_pages " + std::to_string(model.opts.kv_pages) + " cannot hold one context of " + std::to_string(model.opts.n_ctx) +
                " positions (" + std::to_string(model.opts.pages_per_seq()) + " pages)");
}

Logits Generator::feed(const std::vector<int32_t> &tokens) {
  if (tokens.empty()) throw Error("feed: no tokens");
  if (n_past_ + int64_t(tokens.size()) > n_ctx())
    throw Error("the sequence needs " + std::to_string(n_past_ + int64_t(tokens.size())) + " positions but the context holds " +
                std::to_string(n_ctx()) + "; shorten the prompt or raise 'context' in the run config");
  const int64_t batch = session_.max_tokens();
  uint64_t used = 0;  // bytes of logits_ written by this feed
  // One sequence in slot 0 of a model built for one: its pages are the pool in order.
  if (identity_pages_.empty()) {
    identity_pages_.resize(size_t(model_.opts.pages_per_seq()));
    for (size_t i = 0; i < identity_pages_.size(); ++i) identity_pages_[i] = int32_t(i);
  }
  const std::vector<int32_t> slots(size_t(std::min<int64_t>(batch, int64_t(tokens.size()))), 0);
  for (size_t start = 0; start < tokens.size(); start += size_t(batch)) {
    const int64_t n = std::min<int64_t>(batch, int64_t(tokens.size() - start));
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = int32_t(n_past_ + i);
    session_.set_input(models::Model::kTokens, tokens.data() + start, uint64_t(n) * 4);
    session_.set_input(models::Model::kPositions, pos.data(), uint64_t(n) * 4);
    session_.set_input(models::Model::kSlots, slots.data(), uint64_t(n) * 4);
    session_.set_input(models::Model::kPageTable, identity_pages_.data(), identity_pages_.size() * 4);
    if (!model_.opts.all_logits) {
      const int32_t last = int32_t(n - 1);
      session_.set_input(models::Model::kLogitRows, &last, 4);
    }
    const int64_t rows = model_.opts.all_logits ? n : 1;
    const bool want = model_.opts.all_logits || start + size_t(n) == tokens.size();
    const uint64_t bytes = uint64_t(rows) * logit_row_bytes_;
    if (want) {
      if (logits_.size() < used + bytes) {
        // Room for every row this feed may still read, so a long all_logits prompt grows it once.
        const uint64_t rest = model_.opts.all_logits ? (tokens.size() - start) * logit_row_bytes_ : bytes;
        HostMemory more = session_.output_host_memory(models::Model::kLogits, used + rest);
        if (used) std::memcpy(more.data(), logits_.data(), used);
        logits_ = std::move(more);
      }
      // Queued behind the step: the logits come back in the step's own wait.
      session_.read_output_after_next_run(models::Model::kLogits, static_cast<uint8_t *>(logits_.data()) + used, bytes);
    }
    session_.run({n, n_past_, rows, 1, n_past_ + n});
    n_past_ += n;
    if (want) used += bytes;
  }
  return {static_cast<const float *>(logits_.data()), size_t(used / 4)};
}

}  // namespace minfer
