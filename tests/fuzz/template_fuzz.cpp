// libFuzzer target for the chat-template renderer: any template text must parse and render,
// or fail with a TemplateError — never crash, hang or exhaust memory (a model file carries
// its template, so a hostile one must be harmless). Rendered with a small conversation.
#include <cstdint>
#include <string>

#include "chat/jinja/template.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace minfer::jinja;
  const std::string src(reinterpret_cast<const char *>(data), size);
  static const Value messages(List{Value(Dict{{"role", Value("system")}, {"content", Value("Be brief.")}}),
                                   Value(Dict{{"role", Value("user")}, {"content", Value("Hi \xf0\x9f\x8e\x89")}}),
                                   Value(Dict{{"role", Value("assistant")}, {"content", Value("  Hello.\n ")}})});
  RenderOptions o;
  o.max_steps = 200000;  // small limits: each input runs quickly, the checks are the same
  o.max_output = 1 << 20;
  o.max_depth = 64;
  std::tm t{};
  t.tm_year = 126, t.tm_mon = 6, t.tm_mday = 26;
  o.now = t;
  try {
    const Template tmpl(src);
    (void)tmpl.render({{"messages", messages}, {"add_generation_prompt", Value(true)}, {"bos_token", Value("<s>")},
                       {"eos_token", Value("</s>")}, {"tools", Value::none()}},
                      o);
  } catch (const TemplateError &) {
  }
  return 0;
}
