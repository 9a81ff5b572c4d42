// core/tokenizer/tokenizer.hpp — text <-> token ids from a GGUF file's tokenizer metadata.
//
// Two vocabulary kinds: SentencePiece-style ("llama": score-driven merges, byte fallback) and
// byte-level BPE ("gpt2": a pre-tokenizer splits the text, then ranked merges), with the
// pre-tokenizers named by tokenizer.ggml.pre: default / gpt-2, llama-bpe (LLaMA 3), qwen2.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/utf8.hpp"

namespace minfer::gguf {
class File;
}

namespace minfer::tokenizer {

enum class Kind { Spm, Bpe };
enum class Pre { Gpt2, Llama3, Qwen2, Gpt4o, Tekken, Smollm, DeepseekV3 };

// GGUF token types.
enum TokenType : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

// Fill-in-the-middle tokens (-1: none): prefix, suffix, middle; pad; repository name and file
// separator (repository-level FIM, Qwen2.5-Coder's).
struct FimTokens {
  int32_t pre = -1, suf = -1, mid = -1, pad = -1, rep = -1, sep = -1;
  bool usable() const { return pre >= 0 && suf >= 0 && mid >= 0; }
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.*; throws minfer::Error naming the file and the key or value.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File &f);

  // add_special: BOS (and EOS) as the vocabulary asks; parse_special: control and
  // user-defined token texts in `text` become those tokens instead of being spelled out.
  std::vector<int32_t> encode(const std::string &text, bool add_special, bool parse_special) const;

  // The bytes token id stands for (may be part of a UTF-8 sequence). Control tokens give
  // their text only when show_special.
  std::string token_bytes(int32_t id, bool show_special = false) const;

  int32_t n_vocab() const { return int32_t(tokens_.size()); }
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  bool is_end_of_generation(int32_t id) const;
  const std::string &token_text(int32_t id) const { return tokens_.at(size_t(id)); }
  int32_t find(const std::string &text) const;  // -1 when absent
  Kind kind() const { return kind_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  const FimTokens &fim() const { return fim_; }

 private:
  Tokenizer() = default;
  void encode_fragment(const std::string &text, bool first_in_text, std::vector<int32_t> &out) const;
  void encode_spm(const std::string &text, std::vector<int32_t> &out) const;
  void encode_bpe(const std::string &text, std::vector<int32_t> &out) const;
  void byte_fallback(const std::string &piece, std::vector<int32_t> &out) const;

  Kind kind_ = Kind::Spm;
  Pre pre_ = Pre::Gpt2;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<int32_t> types_;
  // Lookups by binary search over sorted arrays, not hash maps: for a 150k vocabulary the maps
  // cost ~15 MB more, which counts against a run's peak memory, and lookups are rare
  // (tokenizing only).
  std::vector<int32_t> ids_by_text_;  // token ids ordered by their text (then id)
  // Merge rules as (left id << 32 | right id, rank), ordered by key (then rank).
  std::vector<std::pair<uint64_t, int32_t>> merge_rank_;
  std::vector<int32_t> specials_;                        // control/user-defined, longest first
  std::vector<int32_t> eog_;
  int32_t bos_ = -1, eos_ = -1, unk_ = -1;
  FimTokens fim_;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = true;
  bool ignore_merges_ = false;  // LLaMA 3: a pre-token that is itself a token is not merged
  std::string byte_to_unicode_[256];
  std::unordered_map<std::string, uint8_t> unicode_to_byte_;
};

// Turns a stream of tokens into text that is always valid UTF-8 (common/utf8.hpp): bytes of a
// character split across tokens are held back until it is complete, ill-formed bytes become
// U+FFFD.
class StreamDecoder {
 public:
  // at_sequence_start: the first token pushed begins the sequence (no BOS before it, or only
  // BOS). A SentencePiece vocabulary that puts a space in front of the text then drops it from
  // the first piece, as llama.cpp's detokenizer does; tokens that continue a sequence (the
  // answer after a prompt) keep every space.
  // show_special: control tokens come out as their text (a reply whose tool calls open with
  // one, such as [TOOL_CALLS]); otherwise they add nothing.
  StreamDecoder(const Tokenizer &t, bool at_sequence_start, bool show_special = false)
      : tok_(t), strip_space_(at_sequence_start), show_special_(show_special) {}
  std::string push(int32_t id);  // the text that became complete
  std::string flush();           // whatever is left (an incomplete tail becomes one U+FFFD)

 private:
  const Tokenizer &tok_;
  utf8::Stream utf8_;
  bool strip_space_, show_special_;
};

// Pre-tokenization of byte-level BPE, exposed for tests: the pieces text splits into.
std::vector<std::string> pre_tokenize(Pre pre, const std::string &text);

}  // namespace minfer::tokenizer
