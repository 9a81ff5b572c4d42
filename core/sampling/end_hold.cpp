// core/sampling/end_hold.cpp — see end_hold.hpp.
#include "sampling/end_hold.hpp"

#include <algorithm>

namespace minfer::sampling {
namespace {

class EndHold : public TokenConstraint {
 public:
  EndHold(std::unique_ptr<TokenConstraint> inner, std::shared_ptr<const std::vector<int32_t>> ends, int64_t min_tokens)
      : inner_(std::move(inner)), ends_(std::move(ends)), min_(min_tokens) {}

  bool allows(int32_t token) const override {
    if (held() && std::binary_search(ends_->begin(), ends_->end(), token)) return false;
    return !inner_ || inner_->allows(token);
  }
  void allowed_all(int64_t n, std::vector<uint8_t> &allowed) const override {
    if (inner_) inner_->allowed_all(n, allowed);
    else allowed.assign(size_t(n), 1);
    if (held())
      for (int32_t t : *ends_)
        if (t >= 0 && t < n) allowed[size_t(t)] = 0;
  }
  void accept(int32_t token) override {
    ++chosen_;
    if (inner_) inner_->accept(token);
  }
  int32_t dead_end_token() const override { return inner_ ? inner_->dead_end_token() : -1; }
  std::unique_ptr<TokenConstraint> fresh() const override {
    return std::make_unique<EndHold>(inner_ ? inner_->fresh() : nullptr, ends_, min_);
  }

 private:
  bool held() const { return chosen_ < min_; }
  std::unique_ptr<TokenConstraint> inner_;
  std::shared_ptr<const std::vector<int32_t>> ends_;  // sorted
  int64_t min_, chosen_ = 0;
};

}  // namespace

std::shared_ptr<const TokenConstraint> hold_end(std::shared_ptr<const TokenConstraint> inner, std::vector<int32_t> end_tokens,
                                                int64_t min_tokens) {
  std::sort(end_tokens.begin(), end_tokens.end());
  auto ends = std::make_shared<const std::vector<int32_t>>(std::move(end_tokens));
  return std::make_shared<EndHold>(inner ? inner->fresh() : nullptr, std::move(ends), min_tokens);
}

}  // namespace minfer::sampling
