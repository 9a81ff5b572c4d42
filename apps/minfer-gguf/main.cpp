// apps/minfer-gguf — GGUF files: inspect, quantize, synthesize.
//   minfer-gguf info FILE [--json]
//   minfer-gguf quantize IN OUT TYPE [--threads N]
//   minfer-gguf tokenize FILE [--no-bos] (-p TEXT | -f TEXT_FILE)
//   minfer-gguf synth --arch ARCH --preset PRESET --type TYPE --seed N [--vocab VOCAB.gguf] [--layers N]
//                     [--chat-template FILE.jinja] -o OUT
//   minfer-gguf template (MODEL.gguf | --template FILE.jinja) --messages FILE.json [...]
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <cerrno>
#include <cstdlib>

#include "common/error.hpp"
#include "common/flags.hpp"
#include "gguf_commands.hpp"

namespace minfer::tools {

// flag_int's rule; a bad value is a usage error here (exit 2, with the usage).
long long parse_int(const std::string &flag, const std::string &value, long long min, long long max) {
  try {
    return flag_int(flag, value, min, max);
  } catch (const Error &e) {
    throw UsageError(e.what());
  }
}

}  // namespace minfer::tools

namespace {

const char *kUsage =
    "usage:\n"
    "  minfer-gguf info FILE [--json]\n"
    "      architecture, hyperparameters, tokenizer, tensor table and totals per type\n"
    "  minfer-gguf quantize IN OUT TYPE [--threads N]\n"
    "      TYPE: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k,\n"
    "            or a mix: q4_k_m, q5_k_m\n"
    "  minfer-gguf synth --arch qwen2|llama|qwen3|qwen3moe|phi3|gemma2|gemma3 --preset PRESET --type TYPE --seed N\n"
    "                    [--vocab VOCAB.gguf] [--threads N] [--layers N] [--chat-template FILE.jinja] -o OUT\n"
    "      a seeded model with the preset's exact shapes and tensor set (--layers: only N blocks);\n"
    "      presets: qwen2: tiny 0.5b 1.5b 7b; llama: those and 3.1-8b; qwen3: tiny 0.6b 8b; phi3: tiny mini tiny-longrope 4-mini;\n"
    "               gemma2: tiny 2b 9b; gemma3: tiny 1b 4b; qwen3moe: tiny 30b-a3b\n"
    "  minfer-gguf tokenize FILE [--no-bos] [--no-parse-special] (-p TEXT | -f TEXT_FILE)\n"
    "      token ids as a JSON array (FILE: a model or a vocabulary-only GGUF)\n"
    "  minfer-gguf template (MODEL.gguf | --template FILE.jinja [--bos S] [--eos S]) --messages FILE.json\n"
    "                       [--no-generation-prompt] [--date YYYY-MM-DD] [--tokens]\n"
    "      the prompt a chat renders to, exactly as it is tokenized (--tokens: its token ids, for a model);\n"
    "      FILE.json: [{\"role\": ..., \"content\": ...}, ...] or {\"messages\": [...], other variables}\n";

}  // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  try {
    if (cmd == "info") return minfer::tools::cmd_info(args);
    if (cmd == "quantize") return minfer::tools::cmd_quantize(args);
    if (cmd == "synth") return minfer::tools::cmd_synth(args);
    if (cmd == "tokenize") return minfer::tools::cmd_tokenize(args);
    if (cmd == "template") return minfer::tools::cmd_template(args);
    std::fprintf(stderr, "minfer-gguf: unknown command '%s'\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const minfer::tools::UsageError &e) {
    std::fprintf(stderr, "minfer-gguf %s: %s\n%s", cmd.c_str(), e.what(), kUsage);
    return 2;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "minfer-gguf %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
