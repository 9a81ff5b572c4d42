#include "sampling/json_constraint.hpp"

#include <algorithm>

namespace minfer::sampling {
namespace {

bool blank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool digit(char c) { return c >= '0' && c <= '9'; }
bool hex(char c) { return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

constexpr int kMaxIndent = 20;

}  // namespace

// Blanks between tokens, as llama.cpp's json.gbnf has them: one space or tab, or a newline and
// at most 20 spaces or tabs of indentation (a model cannot stall in blank lines).
bool JsonState::blank_ok(char c) {
  if (blanks_ == 0) {
    newline_run_ = c == '\n';
    blanks_ = 1;
    return c == ' ' || c == '\t' || c == '\n';
  }
  return newline_run_ && (c == ' ' || c == '\t') && ++blanks_ <= kMaxIndent + 1;
}

// A value begins with c (the caller skipped blanks).
bool JsonState::value_char(char c) {
  switch (c) {
    case '{': stack_ += '{'; mode_ = Mode::key_or_close; return true;
    case '[': stack_ += '['; mode_ = Mode::value_or_close; return true;
    case '"': key_ = false; mode_ = Mode::string; return true;
    case '-': mode_ = Mode::minus; return true;
    case '0': mode_ = Mode::zero; return true;
    case 't': literal_ = "rue"; mode_ = Mode::literal; return true;
    case 'f': literal_ = "alse"; mode_ = Mode::literal; return true;
    case 'n': literal_ = "ull"; mode_ = Mode::literal; return true;
    default:
      if (c >= '1' && c <= '9') return mode_ = Mode::integer, true;
      return false;
  }
}

// c follows a complete value: a separator, a close, or (outside every container) nothing.
bool JsonState::after_value_char(char c) {
  if (stack_.empty()) mode_ = Mode::done;
  if (blank(c)) return blank_ok(c);
  if (mode_ == Mode::done) return false;
  const char open = stack_.back();
  if (c == ',') return mode_ = open == '{' ? Mode::key : Mode::value, true;
  if ((c == '}' && open == '{') || (c == ']' && open == '[')) return close();
  return false;
}

// The innermost container closes: a value ends, or the whole reply.
bool JsonState::close() {
  stack_.pop_back();
  mode_ = stack_.empty() ? Mode::done : Mode::after_value;
  return true;
}

bool JsonState::feed(char c) {
  if (!blank(c)) blanks_ = 0;  // a run of blanks ends (blanks inside strings are no run)
  switch (mode_) {
    case Mode::start:  // json_object: the reply is one object, from its first character
      if (c != '{') return false;
      stack_ += '{';
      mode_ = Mode::key_or_close;
      return true;
    case Mode::value:
    case Mode::value_or_close:
      if (blank(c)) return blank_ok(c);
      if (mode_ == Mode::value_or_close && c == ']') return close();
      return value_char(c);
    case Mode::key_or_close:
    case Mode::key:
      if (blank(c)) return blank_ok(c);
      if (mode_ == Mode::key_or_close && c == '}') return close();
      if (c != '"') return false;
      key_ = true;
      mode_ = Mode::string;
      return true;
    case Mode::colon:
      if (blank(c)) return blank_ok(c);
      return c == ':' && (mode_ = Mode::value, true);
    case Mode::after_value:
    case Mode::done: return after_value_char(c);
    case Mode::string:
      if (c == '"') {
        mode_ = key_ ? Mode::colon : Mode::after_value;
        return true;
      }
      if (c == '\\') return mode_ = Mode::escape, true;
      return static_cast<unsigned char>(c) >= 0x20;  // control characters must be escaped
    case Mode::escape:
      if (c == 'u') return hex_left_ = 4, mode_ = Mode::unicode, true;
      if (std::string("\"\\/bfnrt").find(c) == std::string::npos) return false;
      mode_ = Mode::string;
      return true;
    case Mode::unicode:
      if (!hex(c)) return false;
      if (--hex_left_ == 0) mode_ = Mode::string;
      return true;
    case Mode::literal:
      if (literal_.empty() || c != literal_[0]) return false;
      literal_.erase(0, 1);
      if (literal_.empty()) mode_ = Mode::after_value;
      return true;
    case Mode::minus:
      if (c == '0') return mode_ = Mode::zero, true;
      return digit(c) && (mode_ = Mode::integer, true);
    case Mode::zero:
    case Mode::integer:
      if (digit(c) && mode_ == Mode::integer) return true;
      if (c == '.') return mode_ = Mode::dot, true;
      if (c == 'e' || c == 'E') return mode_ = Mode::exp_mark, true;
      mode_ = Mode::after_value;
      return after_value_char(c);
    case Mode::dot: return digit(c) && (mode_ = Mode::fraction, true);
    case Mode::fraction:
      if (digit(c)) return true;
      if (c == 'e' || c == 'E') return mode_ = Mode::exp_mark, true;
      mode_ = Mode::after_value;
      return after_value_char(c);
    case Mode::exp_mark:
      if (c == '+' || c == '-') return mode_ = Mode::exp_sign, true;
      [[fallthrough]];
    case Mode::exp_sign: return digit(c) && (mode_ = Mode::exponent, true);
    case Mode::exponent:
      if (digit(c)) return true;
      mode_ = Mode::after_value;
      return after_value_char(c);
  }
  return false;
}

bool PatternState::feed(char c) {
  if (part_ >= parts_->size()) return false;
  const ReplyPart &p = (*parts_)[part_];
  switch (p.kind) {
    case ReplyPart::literal:
      if (c != p.texts[0][at_]) return false;
      if (++at_ == p.texts[0].size()) next();
      return true;
    case ReplyPart::one_of: {
      std::vector<uint32_t> still;
      for (const uint32_t k : alive_)
        if (at_ < p.texts[k].size() && p.texts[k][at_] == c) still.push_back(k);
      if (still.empty()) return false;
      alive_ = std::move(still);
      ++at_;
      for (const uint32_t k : alive_)  // the texts are prefix-free: a whole one is the choice
        if (p.texts[k].size() == at_) return next(), true;
      return true;
    }
    case ReplyPart::json_object:
      if (!json_.feed(c)) return false;
      if (json_.complete()) next();
      return true;
  }
  return false;
}

void PatternState::next() {
  ++part_;
  begin_part();
}

void PatternState::begin_part() {
  at_ = 0;
  json_ = JsonState{};
  alive_.clear();
  if (part_ < parts_->size() && (*parts_)[part_].kind == ReplyPart::one_of)
    for (uint32_t k = 0; k < (*parts_)[part_].texts.size(); ++k) alive_.push_back(k);
}

namespace {

class PatternConstraint final : public TokenConstraint {
 public:
  PatternConstraint(std::shared_ptr<const std::vector<std::string>> texts, std::shared_ptr<const std::vector<int32_t>> eog,
                    std::shared_ptr<const std::vector<uint8_t>> string_safe, std::shared_ptr<const std::vector<ReplyPart>> parts)
      : texts_(std::move(texts)), eog_(std::move(eog)), string_safe_(std::move(string_safe)), state_(std::move(parts)) {}
  bool allows(int32_t t) const override {
    if (t < 0 || size_t(t) >= texts_->size()) return false;
    if (std::find(eog_->begin(), eog_->end(), t) != eog_->end()) return state_.complete();
    const std::string &text = (*texts_)[size_t(t)];
    if (text.empty() || state_.complete()) return false;
    PatternState s = state_;
    return s.feed(text);
  }
  // The vocabulary's first bytes tried once each: a token whose first byte cannot come next is
  // refused without feeding it (most of them, outside a JSON string); inside a string, a token
  // of plain string bytes is allowed without feeding it (most of them). Qwen2's 151,936 tokens,
  // one at a time: 1.6-2.0 ms a mask outside strings, 5.8 inside; so: 0.20 at an object's start,
  // 1.75 where a key may begin (every token opening with a blank is fed), 0.48 inside a string.
  void allowed_all(int64_t n, std::vector<uint8_t> &allowed) const override {
    allowed.assign(size_t(n), 0);
    const bool in_string = state_.in_string();
    bool first_ok[256];
    for (int c = 0; c < 256; ++c) {
      PatternState s = state_;
      first_ok[c] = !state_.complete() && s.feed(char(c));
    }
    for (int64_t t = 0; t < n && size_t(t) < texts_->size(); ++t) {
      const std::string &text = (*texts_)[size_t(t)];
      if (!text.empty() && !first_ok[static_cast<unsigned char>(text[0])]) continue;
      allowed[size_t(t)] = (in_string && (*string_safe_)[size_t(t)]) || allows(int32_t(t));
    }
  }
  void accept(int32_t t) override {
    if (t >= 0 && size_t(t) < texts_->size()) state_.feed((*texts_)[size_t(t)]);
  }
  std::unique_ptr<TokenConstraint> fresh() const override {
    return std::make_unique<PatternConstraint>(texts_, eog_, string_safe_, state_.parts());
  }

 private:
  std::shared_ptr<const std::vector<std::string>> texts_;
  std::shared_ptr<const std::vector<int32_t>> eog_;
  std::shared_ptr<const std::vector<uint8_t>> string_safe_;  // text of plain string bytes (not an end token)
  PatternState state_;
};

}  // namespace

std::shared_ptr<const TokenConstraint> pattern_constraint(std::shared_ptr<const std::vector<std::string>> texts, std::vector<int32_t> eog,
                                                          std::vector<ReplyPart> parts) {
  auto safe = std::make_shared<std::vector<uint8_t>>(texts->size(), 0);
  for (size_t t = 0; t < texts->size(); ++t) {
    const std::string &x = (*texts)[t];
    (*safe)[t] = !x.empty() && std::none_of(x.begin(), x.end(), [](char c) { return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20; });
  }
  for (const int32_t e : eog)
    if (e >= 0 && size_t(e) < safe->size()) (*safe)[size_t(e)] = 0;
  return std::make_shared<PatternConstraint>(std::move(texts), std::make_shared<const std::vector<int32_t>>(std::move(eog)), std::move(safe),
                                             std::make_shared<const std::vector<ReplyPart>>(std::move(parts)));
}

std::shared_ptr<const TokenConstraint> json_object_constraint(std::shared_ptr<const std::vector<std::string>> texts, std::vector<int32_t> eog) {
  return pattern_constraint(std::move(texts), std::move(eog), {{ReplyPart::json_object, {}}});
}

}  // namespace minfer::sampling
