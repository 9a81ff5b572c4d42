// libFuzzer target for GBNF grammars (the server's `grammar` field, from any client): any text
// must compile or fail with minfer::Error, and a compiled grammar must follow any reply and
// build token masks without crashing, hanging or exhausting memory. Input: the grammar, then
// after a line "%%" the reply (fed in 3-byte pieces, so code points split) and the tokens'
// picks.
#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "constraint_vocab.hpp"
#include "sampling/gbnf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace minfer::sampling;
  const std::string in(reinterpret_cast<const char *>(data), size);
  const size_t cut = in.find("\n%%\n");
  const std::string text = in.substr(0, cut), rest = cut == std::string::npos ? "" : in.substr(cut + 4);
  std::shared_ptr<const Grammar> g;
  try {
    g = Grammar::compile(text);
  } catch (const minfer::Error &) {
    return 0;
  }
  GrammarState st(g);
  for (size_t i = 0; i < rest.size(); i += 3) (void)st.feed(rest.substr(i, 3));
  (void)st.can_end();
  fuzz_decode(*gbnf_constraint(fuzz_vocab(), g), rest);
  return 0;
}
