#include "synth/synth.hpp"

#include <cmath>
#include <cstring>
#include <memory>

#include "common/error.hpp"
#include "common/parallel.hpp"
#include "gguf/gguf.hpp"
#include "gguf/writer.hpp"
#include "minfer/dtype.h"
#include "quant/quantize.hpp"
#include "quant/type_policy.hpp"

namespace minfer::synth {
namespace {

const Preset kPresets[] = {
    // Qwen2.5 shapes: QKV biases, tied embeddings up to 1.5B, rope theta 1e6, rms eps 1e-6.
    {"qwen2", "tiny", 256, 2, 4, 2, 512, 151936, true, true, 1e6f, 1e-6f, 32768},
    {"qwen2", "0.5b", 896, 24, 14, 2, 4864, 151936, true, true, 1e6f, 1e-6f, 32768},
    {"qwen2", "1.5b", 1536, 28, 12, 2, 8960, 151936, true, true, 1e6f, 1e-6f, 32768},
    {"qwen2", "7b", 3584, 28, 28, 4, 18944, 152064, false, true, 1e6f, 1e-6f, 32768},
    // LLaMA layouts at the same sizes: no biases, separate output, 32000-token vocabulary.
    {"llama", "tiny", 256, 2, 4, 2, 512, 32000, false, false, 10000.0f, 1e-5f, 4096},
    {"llama", "0.5b", 896, 24, 14, 2, 4864, 32000, false, false, 10000.0f, 1e-5f, 4096},
    {"llama", "1.5b", 1536, 28, 12, 2, 8960, 32000, false, false, 10000.0f, 1e-5f, 4096},
    {"llama", "7b", 4096, 32, 32, 32, 11008, 32000, false, false, 10000.0f, 1e-5f, 4096},
    // Qwen3 shapes: heads of 128 values (n_head * 128 != n_embd), per-head q/k norms, no biases.
    {"qwen3", "tiny", 256, 2, 4, 2, 512, 151936, true, false, 1e6f, 1e-6f, 40960, 128, true},
    {"qwen3", "0.6b", 1024, 28, 16, 8, 3072, 151936, true, false, 1e6f, 1e-6f, 40960, 128, true},
    {"qwen3", "8b", 4096, 36, 32, 8, 12288, 151936, false, false, 1e6f, 1e-6f, 40960, 128, true},
    // Qwen3-MoE: qwen3's attention, 128 experts of 768 (8 used) in every layer: Qwen3-30B-A3B.
    {.arch = "qwen3moe", .name = "tiny", .n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_ff = 768, .n_vocab = 151936,
     .tied_embeddings = true, .qkv_bias = false, .rope_theta = 1e6f, .rms_eps = 1e-6f, .context_length = 40960, .head_dim = 64,
     .qk_norm = true, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 256},
    {.arch = "qwen3moe", .name = "30b-a3b", .n_embd = 2048, .n_layer = 48, .n_head = 32, .n_head_kv = 4, .n_ff = 6144, .n_vocab = 151936,
     .tied_embeddings = false, .qkv_bias = false, .rope_theta = 1e6f, .rms_eps = 1e-6f, .context_length = 40960, .head_dim = 128,
     .qk_norm = true, .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 768},
    // Phi-3-mini shapes: fused QKV and gate+up, 32064-token vocabulary, separate output.
    // (attention.sliding_window 2047 as Phi-3-mini-4k files carry it; llama.cpp and minfer ignore it for phi3.)
    {.arch = "phi3", .name = "tiny", .n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 4, .n_ff = 512, .n_vocab = 32064,
     .tied_embeddings = false, .qkv_bias = false, .rope_theta = 10000.0f, .rms_eps = 1e-5f, .context_length = 4096, .fused = true,
     .sliding_window = 2047},
    {.arch = "phi3", .name = "mini", .n_embd = 3072, .n_layer = 32, .n_head = 32, .n_head_kv = 32, .n_ff = 8192, .n_vocab = 32064,
     .tied_embeddings = false, .qkv_bias = false, .rope_theta = 10000.0f, .rms_eps = 1e-5f, .context_length = 4096, .fused = true,
     .sliding_window = 2047},
    // LongRoPE: a tiny one with partial rotary for tests, and Phi-4-mini's shapes (GQA 3:1,
    // heads of 128 rotating 96 dims, tied 200064-token embeddings, 128k context from 4k).
    {.arch = "phi3", .name = "tiny-longrope", .n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_ff = 512, .n_vocab = 32064,
     .tied_embeddings = true, .qkv_bias = false, .rope_theta = 10000.0f, .rms_eps = 1e-5f, .context_length = 131072, .fused = true,
     .rope_dims = 48, .longrope_orig_ctx = 128},
    {.arch = "phi3", .name = "4-mini", .n_embd = 3072, .n_layer = 32, .n_head = 24, .n_head_kv = 8, .n_ff = 8192, .n_vocab = 200064,
     .tied_embeddings = true, .qkv_bias = false, .rope_theta = 10000.0f, .rms_eps = 1e-5f, .context_length = 131072, .fused = true,
     .sliding_window = 262144, .rope_dims = 96, .longrope_orig_ctx = 4096},
    // Llama-3.1-8B: GQA 4:1, 128256-token vocabulary, rope base 5e5 with rope_freqs.
    {.arch = "llama", .name = "3.1-8b", .n_embd = 4096, .n_layer = 32, .n_head = 32, .n_head_kv = 8, .n_ff = 14336, .n_vocab = 128256,
     .tied_embeddings = false, .qkv_bias = false, .rope_theta = 500000.0f, .rms_eps = 1e-5f, .context_length = 131072, .rope_freqs = true},
    // Gemma 2 (2B, 9B): heads of 256, post-norms, soft-caps 50 / 30, a 4096-position window on
    // every other layer, tied 256000-token embeddings.
    {.arch = "gemma2", .name = "tiny", .n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_ff = 512, .n_vocab = 256000,
     .tied_embeddings = true, .qkv_bias = false, .rope_theta = 10000.0f, .rms_eps = 1e-6f, .context_length = 8192, .head_dim = 64,
     .post_norms = true, .attn_softcap = 50.0f, .final_softcap = 30.0f, .sliding_window = 16},
    {.arch = "gemma2", .name = "2b", .n_embd = 2304, .n_layer = 26, .n_head = 8, .n_head_kv = 4, .n_ff = 9216, .n_vocab = 256000,
     .tied_embeddings = true, .qkv_bias = false, .rope_theta = 10000.0f, .rms_eps = 1e-6f, .context_length = 8192, .head_dim = 256,
     .post_norms = true, .attn_softcap = 50.0f, .final_softcap = 30.0f, .sliding_window = 4096},
    {.arch = "gemma2", .name = "9b", .n_embd = 3584, .n_layer = 42, .n_head = 16, .n_head_kv = 8, .n_ff = 14336, .n_vocab = 256000,
     .tied_embeddings = true, .qkv_bias = false, .rope_theta = 10000.0f, .rms_eps = 1e-6f, .context_length = 8192, .head_dim = 256,
     .post_norms = true, .attn_softcap = 50.0f, .final_softcap = 30.0f, .sliding_window = 4096},
    // Gemma 3 (1B, 4B): q/k norms, five local layers (window 512 / 1024, base 1e4) per global
    // one (base 1e6; the 4B with linear RoPE scaling x8), tied 262144-token embeddings.
    {.arch = "gemma3", .name = "tiny", .n_embd = 256, .n_layer = 3, .n_head = 4, .n_head_kv = 1, .n_ff = 512, .n_vocab = 262144,
     .tied_embeddings = true, .qkv_bias = false, .rope_theta = 1e6f, .rms_eps = 1e-6f, .context_length = 32768, .head_dim = 64,
     .qk_norm = true, .post_norms = true, .sliding_window = 16, .swa_pattern = 3, .rope_theta_swa = 10000.0f, .rope_linear_factor = 8.0f},
    {.arch = "gemma3", .name = "1b", .n_embd = 1152, .n_layer = 26, .n_head = 4, .n_head_kv = 1, .n_ff = 6912, .n_vocab = 262144,
     .tied_embeddings = true, .qkv_bias = false, .rope_theta = 1e6f, .rms_eps = 1e-6f, .context_length = 32768, .head_dim = 256,
     .qk_norm = true, .post_norms = true, .sliding_window = 512, .swa_pattern = 6, .rope_theta_swa = 10000.0f},
    {.arch = "gemma3", .name = "4b", .n_embd = 2560, .n_layer = 34, .n_head = 8, .n_head_kv = 4, .n_ff = 10240, .n_vocab = 262208,
     .tied_embeddings = true, .qkv_bias = false, .rope_theta = 1e6f, .rms_eps = 1e-6f, .context_length = 131072, .head_dim = 256,
     .qk_norm = true, .post_norms = true, .sliding_window = 1024, .swa_pattern = 6, .rope_theta_swa = 10000.0f, .rope_linear_factor = 8.0f},
};

// LongRoPE-like factors for synthetic files: 1 for the fastest pairs rising smoothly to the
// slowest (to 1.5 short, to 40 long: the range Phi-3's files carry).
std::vector<float> longrope_factors(int64_t rope_dims, bool long_set) {
  std::vector<float> out(size_t(rope_dims / 2));
  const double top = long_set ? 40.0 : 1.5;
  for (size_t i = 0; i < out.size(); ++i) out[i] = float(1.0 + (top - 1.0) * std::pow(double(i) / double(out.size() - 1), 3.0));
  return out;
}

// Llama 3's frequency factors (convert_hf_to_gguf.py, rope_type llama3): pairs of wavelength
// below original/high keep their frequency, above original/low divide it by `factor`, and
// those between blend the two.
std::vector<float> llama3_rope_factors(int64_t head_dim, float theta) {
  const double factor = 8, low = 1, high = 4, original = 8192;
  std::vector<float> out(size_t(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const double freq = std::pow(double(theta), -2.0 * double(i) / double(head_dim)), wavelen = 2 * M_PI / freq;
    if (wavelen < original / high) out[size_t(i)] = 1.0f;
    else if (wavelen > original / low) out[size_t(i)] = float(factor);
    else {
      const double smooth = (original / wavelen - low) / (high - low);
      out[size_t(i)] = float(1.0 / ((1 - smooth) / factor + smooth));
    }
  }
  return out;
}

// splitmix64: decorrelates (seed, tensor, row) into independent generator states.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// xoshiro256+ with Box-Muller: fast, and the same numbers on every machine.
class Normal {
 public:
  explicit Normal(uint64_t seed) {
    for (auto &w : s_) w = seed = mix(seed);
  }
  float next() {
    if (have_) {
      have_ = false;
      return spare_;
    }
    const double u1 = (double(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740993.0);  // (0, 1]
    const double u2 = double(next_u64() >> 11) * (1.0 / 9007199254740992.0);
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = float(r * std::sin(6.283185307179586 * u2));
    have_ = true;
    return float(r * std::cos(6.283185307179586 * u2));
  }

 private:
  uint64_t next_u64() {
    const uint64_t result = s_[0] + s_[3], t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = (s_[3] << 45) | (s_[3] >> 19);
    return result;
  }
  uint64_t s_[4];
  float spare_ = 0;
  bool have_ = false;
};

struct Planned {
  std::string name;
  std::vector<int64_t> shape;
  int32_t dtype;
  bool is_norm;
};

// GPT-2's printable stand-ins for the 256 byte values.
std::vector<std::string> byte_tokens() {
  std::vector<std::string> out(256);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + extra++);
    std::string s;
    if (cp < 0x80) s += char(cp);
    else s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
    out[size_t(b)] = s;
  }
  return out;
}

void add_vocab(gguf::Writer &w, const Options &o, const Preset &p) {
  using gguf::Value;
  using gguf::ValueType;
  if (o.vocab_path.empty()) {
    std::vector<std::string> tokens = byte_tokens();
    std::vector<Value> types(256, Value::i32(6));  // BYTE
    tokens.push_back("<|endoftext|>");
    types.push_back(Value::i32(3));  // CONTROL
    const int64_t eos = int64_t(tokens.size() - 1);
    // Fill the rest with printable multi-character pieces (in GPT-2's byte spelling), so text
    // sampled from a synthetic model shows up; encoding never makes them (no merges).
    const std::string alphabet = " etaoinshrdlucmfwypvbgkjqxz.,!?ETAOINSHRD";
    const std::vector<std::string> bytes = byte_tokens();
    std::vector<size_t> idx{0, 0};
    while (int64_t(tokens.size()) < p.n_vocab) {
      std::string t;
      for (size_t i : idx) t += bytes[uint8_t(alphabet[i])];
      tokens.push_back(t);
      types.push_back(Value::i32(1));  // NORMAL
      for (size_t k = idx.size(); k-- > 0;) {  // next combination; one character longer after the last
        if (++idx[k] < alphabet.size()) break;
        idx[k] = 0;
        if (k == 0) idx.push_back(0);
      }
    }
    w.set("tokenizer.ggml.model", Value::str("gpt2"));
    w.set("tokenizer.ggml.pre", Value::str("default"));
    w.set("tokenizer.ggml.tokens", Value::strings(tokens));
    w.set("tokenizer.ggml.token_type", Value::array(ValueType::I32, std::move(types)));
    w.set("tokenizer.ggml.merges", Value::array(ValueType::STRING, {}));
    w.set("tokenizer.ggml.bos_token_id", Value::u32(uint32_t(eos)));
    w.set("tokenizer.ggml.eos_token_id", Value::u32(uint32_t(eos)));
    w.set("tokenizer.ggml.add_bos_token", Value::boolean(false));
    return;
  }
  std::shared_ptr<gguf::File> v;
  try {
    v = gguf::File::open(o.vocab_path);
  } catch (const Error &e) {
    throw Error(std::string(e.what()) + " (the --vocab file)");
  }
  const int64_t n_tokens = int64_t(v->get_strings("tokenizer.ggml.tokens").size());
  if (n_tokens > p.n_vocab)
    throw Error(o.vocab_path + ": has " + std::to_string(n_tokens) + " tokens, more than the " + p.name + " preset's vocabulary of " +
                std::to_string(p.n_vocab) + "; pick a vocabulary that fits");
  for (const auto &[key, value] : v->metadata()) {
    if (key.rfind("tokenizer.", 0) != 0) continue;
    Value copy = value;
    // Per-token arrays are padded to the model's vocabulary (as real Qwen2 files are).
    if (copy.type == ValueType::ARRAY && int64_t(copy.arr().size()) == n_tokens &&
        (key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.token_type" || key == "tokenizer.ggml.scores")) {
      auto items = copy.arr().items();
      const ValueType elem = copy.arr().elem;
      for (int64_t i = n_tokens; i < p.n_vocab; ++i) {
        if (elem == ValueType::STRING) items.push_back(Value::str("[PAD" + std::to_string(i) + "]"));
        else if (elem == ValueType::I32) items.push_back(Value::i32(5));
        else items.push_back(Value::f32(-1000.0f));
      }
      copy = Value::array(elem, std::move(items));
    }
    w.set(key, std::move(copy));
  }
}

}  // namespace

Preset find_preset(const std::string &arch, const std::string &preset) {
  for (const auto &p : kPresets)
    if (p.arch == arch && p.name == preset) return p;
  throw Error("no preset '" + preset + "' for architecture '" + arch +
              "'; presets: qwen2: tiny, 0.5b, 1.5b, 7b; llama: those and 3.1-8b; qwen3: tiny, 0.6b, 8b; qwen3moe: tiny, 30b-a3b; phi3: tiny, mini; "
              "gemma2: tiny, 2b, 9b; gemma3: tiny, 1b, 4b");
}

Report synthesize(const Options &o) {
  using gguf::Value;
  Preset p = find_preset(o.arch, o.preset);
  if (o.layers < 0) throw Error("synth: --layers must be positive (0 = the preset's " + std::to_string(p.n_layer) + ")");
  if (o.layers > 0) p.n_layer = o.layers;
  if (p.name == "tiny" && !o.vocab_path.empty()) {
    // The tiny presets are for tests: they take any vocabulary (Gemma's 262,144 tokens too),
    // growing the embedding to fit it.
    try {
      const int64_t n = int64_t(gguf::File::open(o.vocab_path)->get_strings("tokenizer.ggml.tokens").size());
      p.n_vocab = std::max(p.n_vocab, n);
    } catch (const Error &) {  // add_vocab reports a bad --vocab file with its context
    }
  }
  const quant::FileType ft = quant::parse_file_type(o.type);
  if (o.out.empty()) throw Error("synth: no output file given (-o FILE)");
  Report report;

  gguf::Writer w;
  const std::string a = p.arch;
  w.set("general.architecture", Value::str(a));
  w.set("general.name", Value::str("minfer synthetic " + a + " " + p.name));
  w.set("general.file_type", Value::u32(ft.gguf_ftype));
  w.set("general.quantization_version", Value::u32(2));
  w.set(a + ".context_length", Value::u32(p.context_length));
  w.set(a + ".embedding_length", Value::u32(uint32_t(p.n_embd)));
  w.set(a + ".block_count", Value::u32(uint32_t(p.n_layer)));
  w.set(a + ".feed_forward_length", Value::u32(uint32_t(p.n_ff)));
  w.set(a + ".attention.head_count", Value::u32(uint32_t(p.n_head)));
  w.set(a + ".attention.head_count_kv", Value::u32(uint32_t(p.n_head_kv)));
  w.set(a + ".rope.freq_base", Value::f32(p.rope_theta));
  w.set(a + ".attention.layer_norm_rms_epsilon", Value::f32(p.rms_eps));
  const int64_t head_dim = p.head_dim ? p.head_dim : p.n_embd / p.n_head, q_dim = p.n_head * head_dim;
  const int64_t rope_dims = p.rope_dims ? p.rope_dims : head_dim;
  if (a != "qwen2") w.set(a + ".rope.dimension_count", Value::u32(uint32_t(rope_dims)));
  if (p.longrope_orig_ctx > 0) {
    const double scale = double(p.context_length) / double(p.longrope_orig_ctx);
    w.set(a + ".rope.scaling.original_context_length", Value::u32(uint32_t(p.longrope_orig_ctx)));
    w.set(a + ".rope.scaling.attn_factor", Value::f32(float(std::sqrt(1 + std::log(scale) / std::log(double(p.longrope_orig_ctx))))));
  }
  w.set(a + ".vocab_size", Value::u32(uint32_t(p.n_vocab)));
  if (p.head_dim) {  // the key llama.cpp reads for heads that are not n_embd / n_head
    w.set(a + ".attention.key_length", Value::u32(uint32_t(head_dim)));
    w.set(a + ".attention.value_length", Value::u32(uint32_t(head_dim)));
  }
  if (p.attn_softcap > 0) w.set(a + ".attn_logit_softcapping", Value::f32(p.attn_softcap));
  if (p.final_softcap > 0) w.set(a + ".final_logit_softcapping", Value::f32(p.final_softcap));
  if (p.sliding_window > 0) w.set(a + ".attention.sliding_window", Value::u32(uint32_t(p.sliding_window)));
  if (p.swa_pattern > 0) w.set(a + ".attention.sliding_window_pattern", Value::u32(uint32_t(p.swa_pattern)));
  if (p.rope_theta_swa > 0) w.set(a + ".rope.freq_base_swa", Value::f32(p.rope_theta_swa));
  if (p.rope_linear_factor > 0) {
    w.set(a + ".rope.scaling.type", Value::str("linear"));
    w.set(a + ".rope.scaling.factor", Value::f32(p.rope_linear_factor));
  }
  if (p.n_expert > 0) {
    w.set(a + ".expert_count", Value::u32(uint32_t(p.n_expert)));
    w.set(a + ".expert_used_count", Value::u32(uint32_t(p.n_expert_used)));
    w.set(a + ".expert_feed_forward_length", Value::u32(uint32_t(p.n_ff_exp)));
  }
  w.set("minfer.synth.preset", Value::str(a + "/" + p.name));
  w.set("minfer.synth.seed", Value::u64(o.seed));
  add_vocab(w, o, p);
  if (!o.chat_template.empty()) w.set("tokenizer.chat_template", gguf::Value::str(o.chat_template));

  const int64_t kv_dim = head_dim * p.n_head_kv;
  std::vector<Planned> plan;
  auto add = [&](const std::string &name, std::vector<int64_t> shape, bool is_norm = false) {
    const quant::TypeChoice c = quant::choose_type(ft, name, shape, MINFER_DTYPE_F32, int(p.n_layer), !p.tied_embeddings);
    if (!c.note.empty()) report.notes.push_back(c.note);
    plan.push_back({name, shape, c.dtype, is_norm});
  };
  add("token_embd.weight", {p.n_embd, p.n_vocab});
  add("output_norm.weight", {p.n_embd}, true);
  if (p.rope_freqs) plan.push_back({"rope_freqs.weight", {head_dim / 2}, MINFER_DTYPE_F32, false});  // computed, not drawn
  if (p.longrope_orig_ctx > 0)
    for (const char *n : {"rope_factors_long.weight", "rope_factors_short.weight"}) plan.push_back({n, {rope_dims / 2}, MINFER_DTYPE_F32, false});
  if (!p.tied_embeddings) add("output.weight", {p.n_embd, p.n_vocab});
  for (int64_t i = 0; i < p.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    add(b + "attn_norm.weight", {p.n_embd}, true);
    if (p.fused) {
      add(b + "attn_qkv.weight", {p.n_embd, q_dim + 2 * kv_dim});
    } else {
      add(b + "attn_q.weight", {p.n_embd, q_dim});
      add(b + "attn_k.weight", {p.n_embd, kv_dim});
      add(b + "attn_v.weight", {p.n_embd, kv_dim});
    }
    if (p.qk_norm) {
      add(b + "attn_q_norm.weight", {head_dim}, true);
      add(b + "attn_k_norm.weight", {head_dim}, true);
    }
    if (p.qkv_bias) {
      add(b + "attn_q.bias", {p.n_embd});
      add(b + "attn_k.bias", {kv_dim});
      add(b + "attn_v.bias", {kv_dim});
    }
    add(b + "attn_output.weight", {q_dim, p.n_embd});
    if (p.post_norms) add(b + "post_attention_norm.weight", {p.n_embd}, true);
    add(b + "ffn_norm.weight", {p.n_embd}, true);
    if (p.n_expert > 0) {
      add(b + "ffn_gate_inp.weight", {p.n_embd, p.n_expert});
      add(b + "ffn_gate_exps.weight", {p.n_embd, p.n_ff_exp, p.n_expert});
      add(b + "ffn_up_exps.weight", {p.n_embd, p.n_ff_exp, p.n_expert});
      add(b + "ffn_down_exps.weight", {p.n_ff_exp, p.n_embd, p.n_expert});
      if (p.post_norms) add(b + "post_ffw_norm.weight", {p.n_embd}, true);
      continue;
    }
    if (p.fused) {
      add(b + "ffn_up.weight", {p.n_embd, 2 * p.n_ff});  // gate rows, then up rows
    } else {
      add(b + "ffn_gate.weight", {p.n_embd, p.n_ff});
      add(b + "ffn_up.weight", {p.n_embd, p.n_ff});
    }
    add(b + "ffn_down.weight", {p.n_ff, p.n_embd});
    if (p.post_norms) add(b + "post_ffw_norm.weight", {p.n_embd}, true);
  }

  uint64_t total = 0;
  for (const auto &t : plan) total += w.add_tensor(t.name, t.dtype, t.shape);
  w.begin(o.out);

  // Row chunks of ~4M values: bounded memory, and enough rows to split over threads.
  uint64_t done = 0;
  for (size_t ti = 0; ti < plan.size(); ++ti) {
    const Planned &t = plan[ti];
    const int64_t row_len = t.shape[0];
    int64_t rows = 1;
    for (size_t d = 1; d < t.shape.size(); ++d) rows *= t.shape[d];
    report.n_params += row_len * rows;
    const minfer_dtype_traits tr = minfer_dtype_info(t.dtype);
    const int64_t row_bytes = row_len / tr.block_values * tr.block_bytes;
    const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 22) / row_len);
    std::vector<float> x(size_t(std::min(chunk, rows) * row_len));
    std::vector<uint8_t> q(size_t(std::min(chunk, rows) * row_bytes));
    if (t.name == "rope_freqs.weight" || t.name.rfind("rope_factors_", 0) == 0) {
      const std::vector<float> f = t.name == "rope_freqs.weight" ? llama3_rope_factors(head_dim, p.rope_theta)
                                                                  : longrope_factors(rope_dims, t.name == "rope_factors_long.weight");
      w.write_data(reinterpret_cast<const uint8_t *>(f.data()), uint64_t(f.size() * sizeof(float)));
      done += uint64_t(f.size() * sizeof(float));
      continue;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t n = std::min(chunk, rows - r0);
      parallel_ranges(n, o.threads, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          Normal rng(mix(o.seed) ^ mix(uint64_t(ti) << 40 ^ uint64_t(r0 + r)));
          float *row = x.data() + r * row_len;
          for (int64_t c = 0; c < row_len; ++c) row[c] = (t.is_norm ? 1.0f : 0.0f) + 0.02f * rng.next();
        }
        quant::quantize_rows(t.dtype, x.data() + begin * row_len, q.data() + begin * row_bytes, end - begin, row_len, 1);
      });
      w.write_data(q.data(), uint64_t(n * row_bytes));
      done += uint64_t(n * row_bytes);
      if (o.progress) o.progress(double(done) / double(total), t.name);
    }
  }
  w.finish();
  report.file_bytes = w.total_bytes();
  report.n_tensors = int64_t(plan.size());
  return report;
}

}  // namespace minfer::synth
