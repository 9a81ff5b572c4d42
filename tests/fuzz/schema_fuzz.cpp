// libFuzzer target for JSON schemas (response_format's json_schema and tools' parameters, from
// any client): any schema must compile or fail with minfer::Error, strict and not, and a
// compiled one must follow any reply and build token masks without crashing, hanging or
// exhausting memory. Input: the schema's JSON, then after a line "%%" the reply and the
// tokens' picks.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "constraint_vocab.hpp"
#include "sampling/json_schema.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace minfer::sampling;
  const std::string in(reinterpret_cast<const char *>(data), size);
  const size_t cut = in.find("\n%%\n");
  const std::string text = in.substr(0, cut), rest = cut == std::string::npos ? "" : in.substr(cut + 4);
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded()) return 0;
  for (const bool strict : {true, false}) {
    std::shared_ptr<const Schema> s;
    try {
      s = Schema::compile(j, strict);
    } catch (const minfer::Error &) {
      continue;
    }
    SchemaState st(s);
    for (const char c : rest) (void)st.feed(c);
    (void)st.can_end();
    fuzz_decode(*json_constraint(fuzz_vocab(), s), rest);
  }
  return 0;
}
