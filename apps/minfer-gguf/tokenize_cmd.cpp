// minfer-gguf tokenize: token ids of a text as a JSON array, the way llama-tokenize prints them.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "gguf/gguf.hpp"
#include "gguf_commands.hpp"
#include "tokenizer/tokenizer.hpp"

namespace minfer::tools {

int cmd_tokenize(const std::vector<std::string> &args) {
  std::string path, text;
  bool have_text = false, add_bos = true, parse_special = true;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError(a + " needs a value");
      return args[++i];
    };
    if (a == "-p" || a == "--prompt") text = value(), have_text = true;
    else if (a == "-f" || a == "--file") {
      const std::string file = value();
      std::ifstream in(file, std::ios::binary);
      if (!in) throw Error(file + ": cannot open the text file");
      std::stringstream ss;
      ss << in.rdbuf();
      text = ss.str();
      have_text = true;
    } else if (a == "--no-bos") add_bos = false;
    else if (a == "--no-parse-special") parse_special = false;
    else if (path.empty()) path = a;
    else throw UsageError("unexpected argument '" + a + "'");
  }
  if (path.empty() || !have_text) throw UsageError("expected FILE and -p TEXT or -f TEXT_FILE");
  const auto f = gguf::File::open(path);
  const auto tok = tokenizer::Tokenizer::from_gguf(*f);
  const std::vector<int32_t> ids = tok->encode(text, add_bos, parse_special);
  std::printf("[");
  for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? ", " : "", ids[i]);
  std::printf("]\n");
  return 0;
}

}  // namespace minfer::tools
