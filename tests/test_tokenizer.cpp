// Tokenizers against llama.cpp's test vectors (../shared/testdata/vocab): every text of every
// vocabulary must give exactly the expected ids; and decoding gives the text back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "gguf/gguf.hpp"
#include "gguf/writer.hpp"
#include "test_util.hpp"
#include "tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;

namespace {

struct Vectors {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
};

Vectors read_vectors(const std::string &base) {
  std::ifstream in(base + ".inp", std::ios::binary), out(base + ".out");
  std::string raw((std::istreambuf_iterator<char>(in)), {});
  Vectors v;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos; (pos = raw.find(sep)) != std::string::npos;) {
    v.texts.push_back(raw.substr(0, pos));
    raw.erase(0, pos + sep.size());
  }
  for (std::string line; std::getline(out, line);) {
    std::istringstream ss(line);
    std::vector<int32_t> ids;
    for (int32_t id; ss >> id;) ids.push_back(id);
    v.ids.push_back(ids);
  }
  return v;
}

std::string show(const std::vector<int32_t> &ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

class VocabVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectors, EveryTextGivesTheExpectedIds) {
  const std::string td = minfer::test::testdata_dir();
  if (td.empty()) GTEST_SKIP() << "../shared/testdata not found";
  const std::string base = td + "/vocab/ggml-vocab-" + GetParam() + ".gguf";
  const auto f = minfer::gguf::File::open(base);
  const auto tok = minfer::tokenizer::Tokenizer::from_gguf(*f);
  const Vectors v = read_vectors(base);
  ASSERT_EQ(v.texts.size(), v.ids.size());
  ASSERT_GE(v.texts.size(), 40u);
  int passed = 0;
  for (size_t i = 0; i < v.texts.size(); ++i) {
    const auto got = tok->encode(v.texts[i], /*add_special=*/false, /*parse_special=*/false);
    if (got == v.ids[i]) ++passed;
    else ADD_FAILURE() << GetParam() << " text " << i << " '" << v.texts[i] << "'\n  expected:" << show(v.ids[i]) << "\n  got:     " << show(got);
    // Decoding the ids gives the text back (SentencePiece drops the space it added in front).
    minfer::tokenizer::StreamDecoder dec(*tok, /*at_sequence_start=*/true);
    std::string text;
    for (int32_t id : v.ids[i]) text += dec.push(id);
    text += dec.flush();
    EXPECT_EQ(text, v.texts[i]) << GetParam() << " text " << i;
  }
  std::printf("%s: %d/%zu texts match\n", GetParam().c_str(), passed, v.texts.size());
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, VocabVectors, ::testing::Values("llama-spm", "gpt-2", "qwen2", "llama-bpe", "gemma3", "gpt-4o", "deepseek-v3"),
                         [](const auto &info) {
                           std::string n = info.param;
                           for (char &c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

TEST(Tokenizer, SpecialTokensParsedOnlyWhenAsked) {
  const std::string td = minfer::test::testdata_dir();
  if (td.empty()) GTEST_SKIP() << "../shared/testdata not found";
  const auto f = minfer::gguf::File::open(td + "/vocab/ggml-vocab-qwen2.gguf");
  const auto tok = minfer::tokenizer::Tokenizer::from_gguf(*f);
  const int32_t im_start = tok->find("<|im_start|>");
  ASSERT_GE(im_start, 0);
  const auto parsed = tok->encode("<|im_start|>user", false, true);
  ASSERT_FALSE(parsed.empty());
  EXPECT_EQ(parsed[0], im_start);
  const auto spelled = tok->encode("<|im_start|>user", false, false);
  EXPECT_NE(spelled[0], im_start);
  EXPECT_GT(spelled.size(), parsed.size());
  EXPECT_TRUE(tok->is_end_of_generation(tok->find("<|im_end|>")));
}

TEST(Tokenizer, StreamDecoderHoldsBackSplitCharacters) {
  const std::string td = minfer::test::testdata_dir();
  if (td.empty()) GTEST_SKIP() << "../shared/testdata not found";
  const auto f = minfer::gguf::File::open(td + "/vocab/ggml-vocab-llama-spm.gguf");
  const auto tok = minfer::tokenizer::Tokenizer::from_gguf(*f);
  // "🦙" is not in the vocabulary: it falls back to four byte tokens.
  const auto ids = tok->encode("🦙", false, false);
  minfer::tokenizer::StreamDecoder dec(*tok, /*at_sequence_start=*/true);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string piece = dec.push(ids[i]);
    if (i + 1 < ids.size()) EXPECT_TRUE(piece.empty() || piece == " ") << "emitted part of a character";
    out += piece;
  }
  EXPECT_EQ(out + dec.flush(), "🦙");
}

}  // namespace

// tekken (Mistral Nemo) and smollm have no llama.cpp id vectors here: their pieces, as Python's
// `regex` module splits these texts with llama.cpp's patterns for them (the tekken one as
// llama.cpp rewrites it: a cased letter is "not a-z" / "not A-Z"; smollm's digits first).
TEST(PreTokenize, TekkenAndSmollmSplitAsLlamaCppPatterns) {
  using minfer::tokenizer::Pre;
  using minfer::tokenizer::pre_tokenize;
  using V = std::vector<std::string>;
  const std::string a = "HELLOworld iPhone's 12345 x/y\n\n  z", b = "\xC3\x9Cn\xC3\xAF" "code \xD0\x96\xD0\x96\xD0\xB6 3.14 don't  \tgo!!\n/";
  EXPECT_EQ(pre_tokenize(Pre::Tekken, a), (V{"HELLOworld", " i", "Phone", "'s", " ", "1", "2", "3", "4", "5", " x", "/y", "\n\n", " ", " z"}));
  EXPECT_EQ(pre_tokenize(Pre::Tekken, b), (V{"\xC3\x9Cn\xC3\xAF" "code", " \xD0\x96\xD0\x96\xD0\xB6", " ", "3", ".", "1", "4", " don", "'t", "  ", "\tgo", "!!\n/"}));
  EXPECT_EQ(pre_tokenize(Pre::Smollm, a), (V{"HELLOworld", " iPhone", "'s", " ", "1", "2", "3", "4", "5", " x", "/", "y", "\n\n ", " z"}));
  EXPECT_EQ(pre_tokenize(Pre::Smollm, b), (V{"\xC3\x9Cn\xC3\xAF" "code", " \xD0\x96\xD0\x96\xD0\xB6", " ", "3", ".", "1", "4", " don", "'t", "  ", "\t", "go", "!!", "\n", "/"}));
  EXPECT_EQ(pre_tokenize(Pre::Smollm, "a1b22c333 'll  x"), (V{"a", "1", "b", "2", "2", "c", "3", "3", "3", " '", "ll", " ", " x"}));
}

// An unknown pre-tokenizer is refused, naming it: never split with another one's rules.
TEST(Tokenizer, UnknownPreTokenizerIsAnErrorNamingIt) {
  const std::string td = minfer::test::testdata_dir();
  if (td.empty()) GTEST_SKIP() << "../shared/testdata not found";
  const auto f = minfer::gguf::File::open(td + "/vocab/ggml-vocab-qwen2.gguf");
  minfer::gguf::Writer w;
  for (const auto &[k, v] : f->metadata()) w.set(k, k == "tokenizer.ggml.pre" ? minfer::gguf::Value::str("no-such-pre") : v);
  const std::string path = (std::filesystem::temp_directory_path() / "minfer-unknown-pre.gguf").string();
  w.begin(path);
  w.finish();
  const auto g = minfer::gguf::File::open(path);
  try {
    (void)minfer::tokenizer::Tokenizer::from_gguf(*g);
    ADD_FAILURE() << "a file with pre 'no-such-pre' loaded";
  } catch (const minfer::Error &e) {
    EXPECT_NE(std::string(e.what()).find("'no-such-pre' is not supported"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

// A copy of a vocabulary at `path` with some tokens renamed and some u32 keys added.
static void rewrite_vocab(const minfer::gguf::File &f, const std::string &path, const std::vector<std::pair<int32_t, std::string>> &renamed,
                          const std::vector<std::pair<std::string, uint32_t>> &keys) {
  minfer::gguf::Writer w;
  for (const auto &[k, v] : f.metadata()) {
    if (k != "tokenizer.ggml.tokens") {
      w.set(k, v);
      continue;
    }
    std::vector<std::string> names;
    for (const auto &x : v.arr().items()) names.push_back(std::get<std::string>(x.v));
    for (const auto &[id, name] : renamed) names[size_t(id)] = name;
    w.set(k, minfer::gguf::Value::strings(names));
  }
  for (const auto &[k, id] : keys) w.set(k, minfer::gguf::Value::u32(id));
  w.begin(path);
  w.finish();
}

// Generation ends at the turn and message ends llama.cpp knows by name, not only at EOS: a
// Llama 3 vocabulary whose reserved control tokens 128008 and 128010 are renamed as in Llama
// 3.1 (<|eom_id|>, after a built-in tool call) and Phi-3 (<|end|>).
TEST(Tokenizer, TurnEndsByNameEndGeneration) {
  const std::string td = minfer::test::testdata_dir();
  if (td.empty()) GTEST_SKIP() << "../shared/testdata not found";
  const auto f = minfer::gguf::File::open(td + "/vocab/ggml-vocab-llama-bpe.gguf");
  const auto base = minfer::tokenizer::Tokenizer::from_gguf(*f);
  EXPECT_FALSE(base->is_end_of_generation(128008));
  EXPECT_TRUE(base->is_end_of_generation(base->find("<|eot_id|>")));
  const std::string path = (std::filesystem::temp_directory_path() / "minfer-eog-names.gguf").string();
  rewrite_vocab(*f, path, {{128008, "<|eom_id|>"}, {128010, "<|end|>"}}, {});
  const auto g = minfer::gguf::File::open(path);
  const auto tok = minfer::tokenizer::Tokenizer::from_gguf(*g);
  EXPECT_TRUE(tok->is_end_of_generation(128008)) << "<|eom_id|>";
  EXPECT_TRUE(tok->is_end_of_generation(128010)) << "<|end|>";
  EXPECT_FALSE(tok->is_end_of_generation(128011)) << "another reserved token";
  std::filesystem::remove(path);
}

// Fill-in-the-middle tokens: by the texts llama.cpp knows them by (DeepSeek's, Qwen2.5-Coder's),
// or by the file's keys; FIM pad, repository and file-separator tokens end generation.
TEST(Tokenizer, FillInTheMiddleTokens) {
  const std::string td = minfer::test::testdata_dir();
  if (td.empty()) GTEST_SKIP() << "../shared/testdata not found";
  const auto ds = minfer::tokenizer::Tokenizer::from_gguf(*minfer::gguf::File::open(td + "/vocab/ggml-vocab-deepseek-v3.gguf"));
  EXPECT_EQ(ds->fim().pre, 128801);
  EXPECT_EQ(ds->fim().suf, 128800);
  EXPECT_EQ(ds->fim().mid, 128802);
  EXPECT_TRUE(ds->fim().usable());
  const auto f = minfer::gguf::File::open(td + "/vocab/ggml-vocab-llama-bpe.gguf");
  EXPECT_FALSE(minfer::tokenizer::Tokenizer::from_gguf(*f)->fim().usable()) << "Llama 3 has none";
  for (const bool by_key : {false, true}) {
    std::vector<std::pair<int32_t, std::string>> names;
    std::vector<std::pair<std::string, uint32_t>> keys;
    if (!by_key)
      names = {{128002, "<|fim_prefix|>"}, {128003, "<|fim_suffix|>"}, {128004, "<|fim_middle|>"}, {128005, "<|fim_pad|>"}, {128006, "<|repo_name|>"},
               {128007, "<|file_sep|>"}};
    else
      for (const auto &[k, id] : std::vector<std::pair<std::string, uint32_t>>{{"pre", 128012}, {"suf", 128013}, {"mid", 128014}, {"sep", 128015}})
        keys.emplace_back("tokenizer.ggml.fim_" + k + "_token_id", id);
    const std::string path = (std::filesystem::temp_directory_path() / "minfer-fim.gguf").string();
    rewrite_vocab(*f, path, names, keys);
    const auto tok = minfer::tokenizer::Tokenizer::from_gguf(*minfer::gguf::File::open(path));
    const minfer::tokenizer::FimTokens &fim = tok->fim();
    if (!by_key) {
      EXPECT_EQ(std::vector<int32_t>({fim.pre, fim.suf, fim.mid, fim.pad, fim.rep, fim.sep}),
                std::vector<int32_t>({128002, 128003, 128004, 128005, 128006, 128007}));
      for (const int32_t id : {128005, 128006, 128007}) EXPECT_TRUE(tok->is_end_of_generation(id)) << id;
      EXPECT_FALSE(tok->is_end_of_generation(128002));
    } else {
      EXPECT_EQ(std::vector<int32_t>({fim.pre, fim.suf, fim.mid, fim.pad, fim.rep, fim.sep}),
                std::vector<int32_t>({128012, 128013, 128014, -1, -1, 128015}));
    }
    std::filesystem::remove(path);
  }
}
