// libFuzzer target for the server's request fields (apps/minfer-server/openai.hpp): any JSON
// body must give a request or a BadRequest (a 400 naming the field) — never another exception,
// which the server could only answer with a 500, nor a crash or hang.
#include <cstdint>
#include <string>

#include "openai.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace minfer::server;
  const std::string text(reinterpret_cast<const char *>(data), size);
  json body;
  try {
    body = parse_body(text);
  } catch (const BadRequest &) {
    return 0;
  }
  const minfer::sampling::Config defaults;
  const auto each = [&](auto &&f) {
    try {
      f();
    } catch (const BadRequest &) {
    }
  };
  each([&] { (void)parse_generation(body, defaults, 1, Api::chat); });
  each([&] { (void)parse_generation(body, defaults, 1, Api::completions); });
  each([&] { (void)chat_messages(body); });
  each([&] { (void)parse_tools(body); });
  each([&] { (void)template_kwargs(body); });
  each([&] { (void)completion_prompts(body); });
  each([&] { (void)parse_embeddings(body); });
  return 0;
}
