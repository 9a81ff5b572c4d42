#include "tokenizer/tokenizer.hpp"

#include <algorithm>
#include <optional>
#include <queue>

#include "common/error.hpp"
#include "gguf/gguf.hpp"
#include "tokenizer/unicode.hpp"

namespace minfer::tokenizer {
namespace {

// Symbols being merged: a doubly linked list over byte ranges of one piece.
struct Symbol {
  int prev, next;
  size_t start, len;
};

// A candidate merge of symbols left and left's next, with what made it (to spot stale ones).
struct Bigram {
  int left, right;
  double priority;  // SPM: score (higher first); BPE: -rank (lower rank first)
  size_t len;
  bool operator<(const Bigram &o) const {  // std::priority_queue pops the largest
    return priority < o.priority || (priority == o.priority && left > o.left);
  }
};

// Splits text into UTF-8 characters, then repeatedly merges the adjacent pair with the highest
// priority (ties: the leftmost), as both SentencePiece (score) and BPE (rank) do. priority
// returns nothing for a pair that may not merge. Returns the final pieces as (start, length).
template <class Priority>
std::vector<std::pair<size_t, size_t>> merge_pieces(const std::string &text, Priority &&priority) {
  std::vector<Symbol> sym;
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min(utf8_len(uint8_t(text[i])), text.size() - i);
    sym.push_back({int(sym.size()) - 1, int(sym.size()) + 1, i, n});
    i += n;
  }
  if (sym.empty()) return {};
  sym.back().next = -1;
  std::priority_queue<Bigram> q;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const Symbol &a = sym[size_t(l)], &b = sym[size_t(r)];
    if (const std::optional<double> p = priority(text.substr(a.start, a.len), text.substr(b.start, b.len)))
      q.push({l, r, *p, a.len + b.len});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(int(i) - 1, int(i));
  while (!q.empty()) {
    const Bigram b = q.top();
    q.pop();
    Symbol &l = sym[size_t(b.left)], &r = sym[size_t(b.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len || l.next != b.right) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  std::vector<std::pair<size_t, size_t>> out;
  for (int i = 0; i >= 0; i = sym[size_t(i)].next) out.emplace_back(sym[size_t(i)].start, sym[size_t(i)].len);
  return out;
}

// The byte a SentencePiece byte token "<0xHH>" stands for; nothing when the text is not that form.
std::optional<uint8_t> byte_token_value(const std::string &t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = t[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v * 16 + d;
  }
  return uint8_t(v);
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File &f) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  const std::string model = f.get<std::string>("tokenizer.ggml.model");
  if (model == "llama") t->kind_ = Kind::Spm;
  else if (model == "gpt2") t->kind_ = Kind::Bpe;
  else throw Error(f.path() + ": tokenizer.ggml.model '" + model + "' is not supported (supported: llama, gpt2)");
  t->tokens_ = f.get_strings("tokenizer.ggml.tokens");
  const size_t n = t->tokens_.size();
  if (n == 0) throw Error(f.path() + ": tokenizer.ggml.tokens is empty");
  t->types_.assign(n, Normal);
  if (const gguf::Value *tt = f.find("tokenizer.ggml.token_type")) {
    if (tt->type != gguf::ValueType::ARRAY || tt->arr().size() != n || !gguf::is_integer_type(tt->arr().elem))
      throw Error(f.path() + ": tokenizer.ggml.token_type must be an array of " + std::to_string(n) + " integers");
    const std::vector<double> types = f.get_numbers("tokenizer.ggml.token_type");
    for (size_t i = 0; i < n; ++i) t->types_[i] = int32_t(types[i]);
  }
  if (t->kind_ == Kind::Spm)  // decoding reads the byte out of the text: a bad one must fail here, not mid-run
    for (size_t i = 0; i < n; ++i)
      if (t->types_[i] == Byte && !byte_token_value(t->tokens_[i]))
        throw Error(f.path() + ": tokenizer.ggml.tokens[" + std::to_string(i) + "] is '" + t->tokens_[i] +
                    "', of type BYTE (tokenizer.ggml.token_type 6), but a byte token must read <0xHH> with two hex digits; "
                    "the vocabulary is damaged: convert the model again");
  t->scores_.assign(n, 0.0f);
  if (const gguf::Value *sc = f.find("tokenizer.ggml.scores")) {
    if (sc->type != gguf::ValueType::ARRAY || sc->arr().size() != n ||
        (sc->arr().elem != gguf::ValueType::F32 && sc->arr().elem != gguf::ValueType::F64))
      throw Error(f.path() + ": tokenizer.ggml.scores must be an array of " + std::to_string(n) + " floats");
    const std::vector<double> scores = f.get_numbers("tokenizer.ggml.scores");
    for (size_t i = 0; i < n; ++i) t->scores_[i] = float(scores[i]);
  }
  t->ids_by_text_.resize(n);
  for (size_t i = 0; i < n; ++i) t->ids_by_text_[i] = int32_t(i);
  std::stable_sort(t->ids_by_text_.begin(), t->ids_by_text_.end(),
                   [&](int32_t a, int32_t b) { return t->tokens_[size_t(a)] < t->tokens_[size_t(b)]; });

  auto opt_id = [&](const char *key) -> int32_t {
    if (!f.find(key)) return -1;
    const int64_t v = f.get_int(key);
    return v >= 0 && v < int64_t(n) ? int32_t(v) : -1;  // 0xFFFFFFFF means "none"
  };
  t->bos_ = opt_id("tokenizer.ggml.bos_token_id");
  t->eos_ = opt_id("tokenizer.ggml.eos_token_id");
  t->unk_ = opt_id("tokenizer.ggml.unknown_token_id");
  t->add_bos_ = f.get_or<bool>("tokenizer.ggml.add_bos_token", t->kind_ == Kind::Spm);
  t->add_eos_ = f.get_or<bool>("tokenizer.ggml.add_eos_token", false);
  t->add_space_prefix_ = f.get_or<bool>("tokenizer.ggml.add_space_prefix", t->kind_ == Kind::Spm);
  if (t->eos_ >= 0) t->eog_.push_back(t->eos_);
  if (const int32_t eot = opt_id("tokenizer.ggml.eot_token_id"); eot >= 0) t->eog_.push_back(eot);
  if (const int32_t eom = opt_id("tokenizer.ggml.eom_token_id"); eom >= 0) t->eog_.push_back(eom);
  // The turn and message ends llama.cpp ends generation at by name, where a file's EOS is
  // another token: Llama 3.1's <|eom_id|> after a built-in tool call, Phi-3's <|end|>, Gemma's
  // <end_of_turn>, DeepSeek's end of sentence, CodeLlama's <EOT>.
  for (const char *name : {"<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<EOT>",
                           "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>"})
    if (int32_t id = t->find(name); id >= 0 && t->types_[size_t(id)] == Control &&
                                    std::find(t->eog_.begin(), t->eog_.end(), id) == t->eog_.end())
      t->eog_.push_back(id);

  // Fill-in-the-middle tokens: the file's keys (and their older names), else the texts
  // llama.cpp knows them by (Qwen2.5-Coder, CodeLlama, StarCoder, CodeGemma, DeepSeek Coder).
  // Generation also ends at FIM pad, repository and file-separator tokens, as in llama.cpp.
  auto fim_token = [&](std::initializer_list<const char *> keys, std::initializer_list<const char *> texts) {
    for (const char *k : keys)
      if (const int32_t id = opt_id(k); id >= 0) return id;
    for (const char *x : texts)
      if (const int32_t id = t->find(x); id >= 0 && (t->types_[size_t(id)] == Control || t->types_[size_t(id)] == UserDefined)) return id;
    return -1;
  };
  t->fim_.pre = fim_token({"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
                          {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xE2\x96\x81<PRE>",
                           "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>"});
  t->fim_.suf = fim_token({"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
                          {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xE2\x96\x81<SUF>",
                           "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>"});
  t->fim_.mid = fim_token({"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
                          {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xE2\x96\x81<MID>",
                           "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>"});
  t->fim_.pad = fim_token({"tokenizer.ggml.fim_pad_token_id"}, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>"});
  t->fim_.rep = fim_token({"tokenizer.ggml.fim_rep_token_id"}, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  t->fim_.sep = fim_token({"tokenizer.ggml.fim_sep_token_id"}, {"<|file_sep|>", "<file_sep>", "<fim-sep>"});
  for (const int32_t id : {t->fim_.pad, t->fim_.rep, t->fim_.sep})
    if (id >= 0 && std::find(t->eog_.begin(), t->eog_.end(), id) == t->eog_.end()) t->eog_.push_back(id);

  for (size_t i = 0; i < n; ++i)
    if (t->types_[i] == Control || t->types_[i] == UserDefined) t->specials_.push_back(int32_t(i));
  std::stable_sort(t->specials_.begin(), t->specials_.end(),
                   [&](int32_t a, int32_t b) { return t->tokens_[size_t(a)].size() > t->tokens_[size_t(b)].size(); });

  if (t->kind_ == Kind::Bpe) {
    const std::string pre = f.get_or<std::string>("tokenizer.ggml.pre", "default");
    if (pre == "default" || pre == "gpt-2" || pre == "gpt2") t->pre_ = Pre::Gpt2;
    else if (pre == "llama-bpe" || pre == "llama3") t->pre_ = Pre::Llama3, t->ignore_merges_ = true;
    else if (pre == "qwen2" || pre == "deepseek-r1-qwen") t->pre_ = Pre::Qwen2;
    else if (pre == "gpt-4o" || pre == "llama4") t->pre_ = Pre::Gpt4o;
    else if (pre == "tekken") t->pre_ = Pre::Tekken;
    else if (pre == "smollm") t->pre_ = Pre::Smollm;
    else if (pre == "deepseek-v3") t->pre_ = Pre::DeepseekV3;
    else
      throw Error(f.path() + ": tokenizer.ggml.pre '" + pre +
                  "' is not supported (supported: default, gpt-2, llama-bpe, llama3, qwen2, deepseek-r1-qwen, gpt-4o, llama4, tekken, "
                  "smollm, deepseek-v3); a file of another pre-tokenizer would be split wrongly, so it is refused");
    const std::vector<std::string> merges = f.get_strings("tokenizer.ggml.merges");
    t->merge_rank_.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
      // "left right": both sides are tokens in any vocabulary a merge can produce a token of;
      // a rule whose side is not a token could never apply to token pieces.
      const size_t sp = merges[r].find(' ', 1);
      if (sp == std::string::npos) throw Error(f.path() + ": merge rule " + std::to_string(r) + " '" + merges[r] + "' has no space");
      const int32_t l = t->find(merges[r].substr(0, sp)), rt = t->find(merges[r].substr(sp + 1));
      if (l >= 0 && rt >= 0) t->merge_rank_.emplace_back(uint64_t(uint32_t(l)) << 32 | uint32_t(rt), int32_t(r));
    }
    std::sort(t->merge_rank_.begin(), t->merge_rank_.end());
    // GPT-2's byte <-> printable code point map.
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t->byte_to_unicode_[b] = utf8_encode(printable ? uint32_t(b) : uint32_t(256 + extra++));
      t->unicode_to_byte_[t->byte_to_unicode_[b]] = uint8_t(b);
    }
  }
  return t;
}

int32_t Tokenizer::find(const std::string &text) const {
  const auto it = std::lower_bound(ids_by_text_.begin(), ids_by_text_.end(), text,
                                   [&](int32_t id, const std::string &s) { return tokens_[size_t(id)] < s; });
  return it != ids_by_text_.end() && tokens_[size_t(*it)] == text ? *it : -1;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::find(eog_.begin(), eog_.end(), id) != eog_.end();
}

std::vector<int32_t> Tokenizer::encode(const std::string &text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
  // Split the text at special-token texts (longest first): (text, -1) or ("", id) fragments.
  std::vector<std::pair<std::string, int32_t>> frags;
  if (!text.empty()) frags.emplace_back(text, -1);  // empty text: no fragment, no space prefix
  for (int32_t sid : specials_) {
    if (!parse_special && types_[size_t(sid)] == Control) continue;  // user-defined always match
    const std::string &s = tokens_[size_t(sid)];
    if (s.empty()) continue;
    std::vector<std::pair<std::string, int32_t>> next;
    for (auto &[t, id] : frags) {
      if (id >= 0) {
        next.emplace_back(std::move(t), id);
        continue;
      }
      size_t pos = 0;
      for (size_t hit; (hit = t.find(s, pos)) != std::string::npos; pos = hit + s.size()) {
        if (hit > pos) next.emplace_back(t.substr(pos, hit - pos), -1);
        next.emplace_back("", sid);
      }
      if (pos < t.size()) next.emplace_back(t.substr(pos), -1);
    }
    frags = std::move(next);
  }
  bool prev_special = true;  // SPM puts a space before the first text and after a special token
  for (const auto &[t, id] : frags) {
    if (id >= 0) {
      out.push_back(id);
      prev_special = true;
    } else {
      encode_fragment(t, prev_special, out);
      prev_special = false;
    }
  }
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

void Tokenizer::encode_fragment(const std::string &text, bool after_special, std::vector<int32_t> &out) const {
  if (kind_ == Kind::Bpe) {
    encode_bpe(text, out);
    return;
  }
  std::string s = (add_space_prefix_ && after_special) ? " " + text : text;
  std::string escaped;  // SentencePiece spells spaces as U+2581
  for (char c : s) escaped += c == ' ' ? "\xE2\x96\x81" : std::string(1, c);
  encode_spm(escaped, out);
}

void Tokenizer::byte_fallback(const std::string &piece, std::vector<int32_t> &out) const {
  for (unsigned char b : piece) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    const int32_t id = find(hex);
    if (id >= 0) out.push_back(id);
    else if (unk_ >= 0) out.push_back(unk_);
  }
}

void Tokenizer::encode_spm(const std::string &text, std::vector<int32_t> &out) const {
  // A pair merges when the joined text is a token; the best score goes first.
  const auto pieces = merge_pieces(text, [&](const std::string &l, const std::string &r) -> std::optional<double> {
    const int32_t id = find(l + r);
    if (id < 0) return std::nullopt;
    return double(scores_[size_t(id)]);
  });
  for (const auto &[start, len] : pieces) {
    const std::string piece = text.substr(start, len);
    const int32_t id = find(piece);
    if (id >= 0) out.push_back(id);
    else byte_fallback(piece, out);
  }
}

void Tokenizer::encode_bpe(const std::string &text, std::vector<int32_t> &out) const {
  for (const std::string &piece : pre_tokenize(pre_, text)) {
    std::string word;  // the piece's bytes as GPT-2's printable code points
    for (unsigned char c : piece) word += byte_to_unicode_[c];
    if (ignore_merges_) {
      if (const int32_t id = find(word); id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    // A pair merges when "left right" is a merge rule; the lowest rank goes first.
    const auto pieces = merge_pieces(word, [&](const std::string &l, const std::string &r) -> std::optional<double> {
      const int32_t li = find(l), ri = li >= 0 ? find(r) : -1;
      if (ri < 0) return std::nullopt;
      const uint64_t key = uint64_t(uint32_t(li)) << 32 | uint32_t(ri);
      const auto it = std::lower_bound(merge_rank_.begin(), merge_rank_.end(), std::make_pair(key, INT32_MIN));
      if (it == merge_rank_.end() || it->first != key) return std::nullopt;
      return -double(it->second);
    });
    for (const auto &[start, len] : pieces) {
      const std::string s = word.substr(start, len);
      if (const int32_t id = find(s); id >= 0) {
        out.push_back(id);
        continue;
      }
      for (size_t k = 0; k < s.size();) {  // not a token: its characters one by one
        const size_t n = utf8_len(uint8_t(s[k]));
        if (const int32_t id = find(s.substr(k, n)); id >= 0) out.push_back(id);
        else if (unk_ >= 0) out.push_back(unk_);
        k += n;
      }
    }
  }
}

std::string Tokenizer::token_bytes(int32_t id, bool show_special) const {
  if (id < 0 || id >= n_vocab()) return "";
  const std::string &t = tokens_[size_t(id)];
  const int32_t type = types_[size_t(id)];
  if (type == Control || type == Unknown || type == Unused) return show_special ? t : "";
  if (kind_ == Kind::Spm) {
    if (type == Byte) return std::string(1, char(*byte_token_value(t)));  // checked at load
    std::string s;
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, 3, "\xE2\x96\x81") == 0) s += ' ', i += 3;
      else s += t[i++];
    }
    return s;
  }
  if (type == UserDefined) return t;
  std::string s;
  for (size_t i = 0; i < t.size();) {
    const size_t n = utf8_len(uint8_t(t[i]));
    auto it = unicode_to_byte_.find(t.substr(i, n));
    if (it != unicode_to_byte_.end()) s += char(it->second);
    else s += t.substr(i, n);
    i += n;
  }
  return s;
}

std::string StreamDecoder::push(int32_t id) {
  std::string bytes = tok_.token_bytes(id, show_special_);
  if (strip_space_ && !bytes.empty()) {  // the first piece with text (BOS has none)
    if (tok_.kind() == Kind::Spm && tok_.add_space_prefix() && bytes[0] == ' ') bytes.erase(0, 1);
    strip_space_ = false;
  }
  return utf8_.push(bytes);
}

std::string StreamDecoder::flush() { return utf8_.finish(); }

}  // namespace minfer::tokenizer
