// minfer-gguf template: the prompt text a conversation renders to through a chat template
// (the model's, or a .jinja file), exactly as minfer tokenizes it; --tokens prints the ids.
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "chat/chat_template.hpp"
#include "common/error.hpp"
#include "gguf/gguf.hpp"
#include "gguf_commands.hpp"
#include "tokenizer/tokenizer.hpp"

namespace minfer::tools {
namespace {

std::string read_text(const std::string &path, const char *what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open " + what);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::tm parse_date(const std::string &d) {
  std::tm t{};
  int y, m, day;
  char extra;
  if (std::sscanf(d.c_str(), "%4d-%2d-%2d%c", &y, &m, &day, &extra) != 3 || m < 1 || m > 12 || day < 1 || day > 31)
    throw UsageError("--date takes YYYY-MM-DD, not '" + d + "'");
  t.tm_year = y - 1900;
  t.tm_mon = m - 1;
  t.tm_mday = day;
  t.tm_isdst = -1;
  std::tm copy = t;
  timegm(&copy);  // fills the weekday and the day of the year for %a, %j
  t.tm_wday = copy.tm_wday;
  t.tm_yday = copy.tm_yday;
  return t;
}

}  // namespace

int cmd_template(const std::vector<std::string> &args) {
  std::string model, template_file, messages_file, bos, eos;
  bool generation_prompt = true, tokens = false;
  jinja::RenderOptions ro;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError(a + " needs a value");
      return args[++i];
    };
    if (a == "--template") template_file = value();
    else if (a == "--messages") messages_file = value();
    else if (a == "--bos") bos = value();
    else if (a == "--eos") eos = value();
    else if (a == "--no-generation-prompt") generation_prompt = false;
    else if (a == "--date") ro.now = parse_date(value());
    else if (a == "--tokens") tokens = true;
    else if (a.rfind("--", 0) == 0) throw UsageError("unknown option '" + a + "'");
    else if (model.empty()) model = a;
    else throw UsageError("unexpected argument '" + a + "'");
  }
  if (model.empty() == template_file.empty()) throw UsageError("give a MODEL.gguf or --template FILE.jinja (one of them)");
  if (messages_file.empty()) throw UsageError("--messages FILE.json is required");
  if (tokens && model.empty()) throw UsageError("--tokens needs a model (its vocabulary tokenizes the prompt)");

  nlohmann::ordered_json j;  // tool schemas render through tojson in the file's key order
  try {
    j = nlohmann::ordered_json::parse(read_text(messages_file, "the messages file"));
  } catch (const nlohmann::ordered_json::parse_error &e) {
    throw Error(messages_file + ": not valid JSON (" + e.what() + ")");
  }
  jinja::Dict extra;
  nlohmann::ordered_json messages = j;
  if (j.is_object()) {
    if (!j.contains("messages")) throw Error(messages_file + ": an object must have \"messages\" (an array of {role, content})");
    messages = j["messages"];
    for (const auto &[k, v] : j.items())
      if (k != "messages") extra.emplace_back(k, chat::from_json(v));
  }
  if (!messages.is_array()) throw Error(messages_file + ": \"messages\" must be an array of {role, content} objects");
  for (size_t i = 0; i < messages.size(); ++i)
    if (!messages[i].is_object() || !messages[i].contains("role"))
      throw Error(messages_file + ": message " + std::to_string(i) + " must be an object with a \"role\"");

  std::string text;
  if (!model.empty()) {
    const auto f = gguf::File::open(model);
    const auto tok = tokenizer::Tokenizer::from_gguf(*f);
    const chat::ChatTemplate t = chat::ChatTemplate::for_model(*f, *tok);
    text = t.render(chat::from_json(messages), generation_prompt, extra, ro);
    if (tokens) {
      const std::vector<int32_t> ids = chat::tokenize_prompt(*tok, text);
      std::printf("[");
      for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? ", " : "", ids[i]);
      std::printf("]\n");
      return 0;
    }
  } else {
    const chat::ChatTemplate t(read_text(template_file, "the template"), template_file, bos, eos);
    text = t.render(chat::from_json(messages), generation_prompt, extra, ro);
  }
  std::fwrite(text.data(), 1, text.size(), stdout);  // exactly the prompt: no newline added
  return 0;
}

}  // namespace minfer::tools
