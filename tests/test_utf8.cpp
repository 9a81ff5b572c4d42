// Valid UTF-8 out of any bytes (common/utf8.hpp): each maximal ill-formed subpart becomes one
// U+FFFD. The expected strings are what Python 3 prints for bytes.decode('utf-8', 'replace'),
// which follows the Unicode Standard's recommended practice.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/json.hpp"
#include "common/utf8.hpp"

namespace {

const std::vector<std::pair<std::string, std::string>> kCases = {
    {"\xe5\xad", "\xef\xbf\xbd"},                                      // cut short: one subpart
    {"\x78\x80\x79", "\x78\xef\xbf\xbd\x79"},                          // stray continuation byte
    {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},                          // overlong lead, then a stray
    {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},          // a surrogate
    {"\xf0\x80\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},  // overlong 4-byte
    {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},  // above U+10FFFF
    {"\xf0\x9f\x98", "\xef\xbf\xbd"},                                  // 3 of an emoji's 4 bytes
    {"\xe0\x9f\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},          // overlong 3-byte
    {"\xe0\xa0\x80", "\xe0\xa0\x80"},                                  // U+0800, the first 3-byte one
    {"\xf5\x80", "\xef\xbf\xbd\xef\xbf\xbd"},
    {"\xff\xfe", "\xef\xbf\xbd\xef\xbf\xbd"},
    {"\xc2", "\xef\xbf\xbd"},
    {"\xc2\x41", "\xef\xbf\xbd\x41"},
    {"\xe1\x80\x41", "\xef\xbf\xbd\x41"},                              // two bytes of a subpart, one U+FFFD
    {"\xf1\x80\x80\xc0", "\xef\xbf\xbd\xef\xbf\xbd"},
    {"\x61\xf0\x9f\x98\x80\x62\xe2\x82", "\x61\xf0\x9f\x98\x80\x62\xef\xbf\xbd"},
    {"plain ascii", "plain ascii"},
};

TEST(Utf8, SanitizeReplacesEachMaximalSubpartOnce) {
  for (const auto &[in, want] : kCases) {
    EXPECT_EQ(minfer::utf8::sanitize(in), want) << "input bytes: " << testing::PrintToString(in);
    EXPECT_TRUE(minfer::utf8::is_valid(minfer::utf8::sanitize(in)));
  }
}

// The stream gives the same text however the bytes arrive: whole, or one byte at a time
// (token pieces split characters anywhere), and it never emits part of a character.
TEST(Utf8, StreamInAnyPiecesEqualsTheWhole) {
  for (const auto &[in, want] : kCases) {
    minfer::utf8::Stream st;
    std::string out;
    for (char c : in) {
      const std::string piece = st.push(std::string(1, c));
      EXPECT_TRUE(minfer::utf8::is_valid(piece)) << testing::PrintToString(in);
      out += piece;
    }
    out += st.finish();
    EXPECT_EQ(out, want) << "byte by byte: " << testing::PrintToString(in);
  }
}

// --json goes through nlohmann-json's replacement: it must agree with the stream's rule.
TEST(Utf8, JsonDumpUsesTheSameRule) {
  for (const auto &[in, want] : kCases)
    EXPECT_EQ(minfer::json::dump(minfer::json::Json(in)), minfer::json::dump(minfer::json::Json(minfer::utf8::sanitize(in))))
        << testing::PrintToString(in);
}

}  // namespace
