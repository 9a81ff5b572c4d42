#include "sampling/json_constraint.hpp"

#include "tokenizer/tokenizer.hpp"

#include <algorithm>

namespace minfer::sampling {
bool PatternState::feed(char c) {
  if (part_ >= parts_->size()) return false;
  const ReplyPart &p = (*parts_)[part_];
  if (p.kind == ReplyPart::literal) {
    if (c != p.text[at_]) return false;
    if (++at_ == p.text.size()) next();
    return true;
  }
  if (p.kind == ReplyPart::choice && !json_) {  // still in the texts: keep those c continues
    std::erase_if(live_, [&](uint32_t i) { return p.choices[i].text[at_] != c; });
    if (live_.empty()) return false;
    ++at_;
    for (const uint32_t i : live_)
      if (p.choices[i].text.size() == at_) json_.emplace(p.choices[i].schema);  // a whole text: its JSON value follows
    return true;
  }
  if (json_->feed(c)) {
    if (json_->settled()) next();  // closed: the next part begins with the next character
    return true;
  }
  if (!json_->can_end()) return false;
  next();  // a number or literal value ended before c: c belongs to what follows
  return feed(c);
}

bool PatternState::complete() const {
  if (part_ >= parts_->size()) return true;
  return part_ + 1 == parts_->size() && json_ && json_->can_end();
}

void PatternState::next() {
  ++part_;
  begin_part();
}

void PatternState::begin_part() {
  at_ = 0;
  json_.reset();
  live_.clear();
  if (part_ < parts_->size() && (*parts_)[part_].kind == ReplyPart::json) json_.emplace((*parts_)[part_].schema);
  if (part_ < parts_->size() && (*parts_)[part_].kind == ReplyPart::choice)
    for (uint32_t i = 0; i < (*parts_)[part_].choices.size(); ++i)
      if (!(*parts_)[part_].choices[i].text.empty()) live_.push_back(i);
  if (part_ < parts_->size() && (*parts_)[part_].kind == ReplyPart::literal && (*parts_)[part_].text.empty()) next();
}

namespace {

class PatternConstraint final : public TokenConstraint {
 public:
  PatternConstraint(std::shared_ptr<const ConstraintVocab> vocab, std::shared_ptr<const std::vector<ReplyPart>> parts)
      : v_(std::move(vocab)), state_(std::move(parts)) {}
  bool allows(int32_t t) const override {
    if (t < 0 || size_t(t) >= v_->texts.size()) return false;
    if (std::find(v_->eog.begin(), v_->eog.end(), t) != v_->eog.end()) return state_.complete();
    const std::string &text = v_->texts[size_t(t)];
    if (text.empty()) return false;
    PatternState s = state_;
    return s.feed(text);
  }
  // The vocabulary's first bytes, and pairs of bytes, tried once each: a token whose first one
  // or two bytes cannot come next is refused without feeding it (outside a JSON string, nearly
  // all: blank-led words fail at their second byte); inside a string, a token of plain string
  // bytes is allowed without feeding it. Qwen2's 151,936 tokens: see docs/SERVER.md.
  void allowed_all(int64_t n, std::vector<uint8_t> &allowed) const override {
    allowed.assign(size_t(n), 0);
    const bool in_string = state_.in_string();
    std::vector<std::optional<PatternState>> after(256);  // the state after a first byte it takes
    for (int c = 0; c < 256; ++c) {
      PatternState s = state_;
      if (s.feed(char(c))) after[size_t(c)] = std::move(s);
    }
    std::vector<int8_t> pair_ok(65536, -1);  // two first bytes: -1 not tried yet
    for (int64_t t = 0; t < n && size_t(t) < v_->texts.size(); ++t) {
      const std::string &text = v_->texts[size_t(t)];
      if (!text.empty()) {
        const auto c0 = static_cast<unsigned char>(text[0]);
        if (!after[c0]) continue;
        if (in_string && v_->string_safe[size_t(t)]) {
          allowed[size_t(t)] = 1;
          continue;
        }
        if (text.size() == 1) {
          allowed[size_t(t)] = 1;
          continue;
        }
        int8_t &ok = pair_ok[size_t(c0) << 8 | static_cast<unsigned char>(text[1])];
        if (ok < 0) {
          PatternState s = *after[c0];
          ok = s.feed(text[1]);
        }
        if (!ok) continue;
      }
      allowed[size_t(t)] = allows(int32_t(t));
    }
  }
  void accept(int32_t t) override {
    if (t >= 0 && size_t(t) < v_->texts.size()) state_.feed(v_->texts[size_t(t)]);
  }
  std::unique_ptr<TokenConstraint> fresh() const override { return std::make_unique<PatternConstraint>(v_, state_.parts()); }
  int32_t dead_end_token() const override { return v_->eog.empty() ? -1 : v_->eog[0]; }
  bool feed(const std::string &text) { return state_.feed(text); }
  bool complete() const { return state_.complete(); }

 private:
  std::shared_ptr<const ConstraintVocab> v_;
  PatternState state_;
};

// Free text until the reply writes the trigger; then the parts, to their end; then free again
// (llama.cpp's lazy grammars: a model that opens a tool call must finish it as the schema says).
// at_start: only a trigger that opens the reply (after blanks) counts; keep_trigger: the
// trigger's text is the parts' own start (Llama 3's call is the reply's JSON object).
class LazyConstraint final : public TokenConstraint {
 public:
  LazyConstraint(std::shared_ptr<const ConstraintVocab> vocab, std::string trigger, std::shared_ptr<const std::vector<ReplyPart>> parts, LazyOptions o)
      : v_(std::move(vocab)), trigger_(std::move(trigger)), parts_(std::move(parts)), o_(o) {}
  bool allows(int32_t t) const override {
    if (active_) return active_->allows(t);
    if (done_) return std::find(v_->eog.begin(), v_->eog.end(), t) != v_->eog.end();  // once: only the end after the parts
    if (t < 0 || size_t(t) >= v_->texts.size()) return false;
    const std::string &text = v_->texts[size_t(t)];
    if (text.empty() || off_) return true;  // an end or a control token, or free for good: anything
    const std::string s = tail_ + text;
    const size_t k = locate(s);
    if (k == std::string::npos) return true;
    PatternState p(parts_);  // the rest of the token must begin the parts
    return p.feed(s.substr(o_.keep_trigger ? k : k + trigger_.size()));
  }
  void allowed_all(int64_t n, std::vector<uint8_t> &allowed) const override {
    if (active_) return active_->allowed_all(n, allowed);
    if (done_) {
      allowed.assign(size_t(n), 0);
      for (const int32_t e : v_->eog)
        if (e >= 0 && e < n) allowed[size_t(e)] = 1;
      return;
    }
    TokenConstraint::allowed_all(n, allowed);
  }
  void accept(int32_t t) override {
    if (t < 0 || size_t(t) >= v_->texts.size()) return;
    const std::string &text = v_->texts[size_t(t)];
    if (active_) {
      active_->accept(t);
    } else {
      if (off_ || done_) return;
      const std::string s = tail_ + text;
      const size_t k = locate(s);
      if (k == std::string::npos) {
        if (!o_.at_start) tail_ = s.substr(s.size() - std::min(s.size(), trigger_.size() - 1));  // a trigger split across tokens
        else if (may_still_open(s)) tail_ = s.substr(std::min(s.size(), s.find_first_not_of(" \t\r\n")));
        else off_ = true;  // the reply opened with something else
        return;
      }
      active_ = std::make_unique<PatternConstraint>(v_, parts_);
      active_->feed(s.substr(o_.keep_trigger ? k : k + trigger_.size()));
    }
    if (active_->complete()) active_.reset(), tail_.clear(), done_ = o_.once, off_ = o_.at_start;
  }
  std::unique_ptr<TokenConstraint> fresh() const override { return std::make_unique<LazyConstraint>(v_, trigger_, parts_, o_); }
  int32_t dead_end_token() const override { return v_->eog.empty() ? -1 : v_->eog[0]; }

 private:
  // Where the trigger begins in s (free text so far and a token's), npos when not there.
  size_t locate(const std::string &s) const {
    if (!o_.at_start) return s.find(trigger_);
    const size_t k = s.find_first_not_of(" \t\r\n");
    return k != std::string::npos && s.compare(k, trigger_.size(), trigger_) == 0 ? k : std::string::npos;
  }
  // at_start: the reply so far is blanks and perhaps the trigger's beginning.
  bool may_still_open(const std::string &s) const {
    const size_t k = s.find_first_not_of(" \t\r\n");
    return k == std::string::npos || trigger_.compare(0, s.size() - k, s, k) == 0;
  }
  std::shared_ptr<const ConstraintVocab> v_;
  std::string trigger_;
  std::shared_ptr<const std::vector<ReplyPart>> parts_;
  LazyOptions o_;
  std::unique_ptr<PatternConstraint> active_;  // between the trigger and the parts' end
  std::string tail_;                           // free text kept to find a trigger split across tokens
  bool done_ = false;                          // once, and the parts were written: only the end
  bool off_ = false;                           // at_start, and the reply did not open with the trigger: free for good
};

}  // namespace

std::shared_ptr<const ConstraintVocab> constraint_vocab(std::vector<std::string> texts, std::vector<int32_t> eog) {
  auto v = std::make_shared<ConstraintVocab>();
  v->string_safe.assign(texts.size(), 0);
  for (size_t t = 0; t < texts.size(); ++t) {
    const std::string &x = texts[t];
    v->string_safe[t] = !x.empty() && std::none_of(x.begin(), x.end(), [](char c) { return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20; });
  }
  for (const int32_t e : eog)
    if (e >= 0 && size_t(e) < texts.size()) v->string_safe[size_t(e)] = 0;
  v->texts = std::move(texts);
  v->eog = std::move(eog);
  return v;
}

std::shared_ptr<const ConstraintVocab> constraint_vocab(const tokenizer::Tokenizer &tok) {
  std::vector<std::string> texts;
  std::vector<int32_t> eog;
  for (int32_t t = 0; t < tok.n_vocab(); ++t) {
    texts.push_back(tok.token_bytes(t));
    if (tok.is_end_of_generation(t)) eog.push_back(t);
  }
  return constraint_vocab(std::move(texts), std::move(eog));
}

std::shared_ptr<const TokenConstraint> pattern_constraint(std::shared_ptr<const ConstraintVocab> vocab, std::vector<ReplyPart> parts) {
  return std::make_shared<PatternConstraint>(std::move(vocab), std::make_shared<const std::vector<ReplyPart>>(std::move(parts)));
}

std::shared_ptr<const TokenConstraint> json_constraint(std::shared_ptr<const ConstraintVocab> vocab, std::shared_ptr<const Schema> schema) {
  return pattern_constraint(std::move(vocab), {{ReplyPart::json, {}, std::move(schema)}});
}

std::shared_ptr<const TokenConstraint> lazy_constraint(std::shared_ptr<const ConstraintVocab> vocab, std::string trigger, std::vector<ReplyPart> parts,
                                                       LazyOptions o) {
  return std::make_shared<LazyConstraint>(std::move(vocab), std::move(trigger), std::make_shared<const std::vector<ReplyPart>>(std::move(parts)), o);
}

}  // namespace minfer::sampling
