// The paged KV cache's accounting (core/runtime/page_pool): pages given out as a sequence
// grows and returned when it ends, a full pool refused without harm, and prefix reuse: two
// sequences with a 200-token common prefix share the pages of one prefix, never writing into
// a shared page; freed pages stay reusable until the pool needs them.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "common/error.hpp"
#include "runtime/page_pool.hpp"

namespace {

using minfer::kv::PagePool;

std::vector<int32_t> tokens(int32_t n, int32_t first = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Opens seq with prompt, reserves and commits the part not reused; returns the reused positions.
int64_t start(PagePool &pool, int64_t seq, const std::vector<int32_t> &prompt) {
  const int64_t reused = pool.open(seq, prompt);
  EXPECT_TRUE(pool.reserve(seq, int64_t(prompt.size())));
  pool.commit(seq, std::span<const int32_t>(prompt).subspan(size_t(reused)));
  return reused;
}

TEST(PagePool, PagesFollowTheSequenceAndComeBack) {
  PagePool pool(8, 16);
  EXPECT_EQ(start(pool, 1, tokens(20)), 0);
  EXPECT_EQ(pool.pages(1).size(), 2u);
  EXPECT_EQ(pool.stats().used, 2);
  // Decode: one position at a time, a new page at each 16th.
  for (int i = 0; i < 13; ++i) {
    ASSERT_TRUE(pool.reserve(1, pool.positions(1) + 1));
    pool.commit(1, std::vector<int32_t>{1000 + i});
  }
  EXPECT_EQ(pool.positions(1), 33);
  EXPECT_EQ(pool.pages(1).size(), 3u);
  pool.close(1);
  EXPECT_EQ(pool.stats().used, 0);
  EXPECT_EQ(pool.stats().free, 8);
  EXPECT_FALSE(pool.is_open(1));
}

TEST(PagePool, AFullPoolRefusesWithoutChangingAnything) {
  PagePool pool(4, 16);
  start(pool, 1, tokens(40));  // 3 pages
  ASSERT_TRUE(pool.open(2, tokens(30, 5000)) == 0);
  EXPECT_FALSE(pool.reserve(2, 30)) << "2 pages asked, 1 free";
  EXPECT_TRUE(pool.pages(2).empty());
  EXPECT_EQ(pool.stats().free, 1);
  EXPECT_TRUE(pool.reserve(2, 16));
  EXPECT_THROW(pool.commit(2, tokens(17, 5000)), minfer::Error) << "writing past the reserved room";
  EXPECT_THROW(pool.open(2, tokens(3)), minfer::Error) << "opened twice";
  EXPECT_THROW(PagePool(4, 24), minfer::Error) << "not a power of two";
}

TEST(PagePool, TwoSequencesWithA200TokenPrefixShareItsPages) {
  PagePool pool(64, 16);
  std::vector<int32_t> a = tokens(200), b = tokens(200);
  for (int32_t i = 0; i < 40; ++i) a.push_back(7000 + i), b.push_back(9000 + i);
  EXPECT_EQ(start(pool, 1, a), 0);
  const int64_t reused = start(pool, 2, b);
  EXPECT_EQ(reused, 192) << "12 full pages of the 200-token prefix";
  for (size_t k = 0; k < 12; ++k) {
    EXPECT_EQ(pool.pages(1)[k], pool.pages(2)[k]);
    EXPECT_EQ(pool.users(pool.pages(1)[k]), 2);
  }
  for (size_t k = 12; k < pool.pages(2).size(); ++k) EXPECT_EQ(pool.users(pool.pages(2)[k]), 1) << "b writes only pages of its own";
  const auto s = pool.stats();
  EXPECT_EQ(s.shared, 12);
  EXPECT_EQ(s.used, 15 + 15 - 12) << "one prefix, two tails";
}

TEST(PagePool, ReuseStopsAtTheFirstDifferentPageAndKeepsTheLastToken) {
  PagePool pool(32, 16);
  start(pool, 1, tokens(64));
  std::vector<int32_t> c = tokens(64);
  c[50] = -1;  // page 3 differs
  EXPECT_EQ(start(pool, 2, c), 48);
  // The whole prompt already in the pool: its last token is still computed.
  EXPECT_EQ(start(pool, 3, tokens(64)), 48);
  // A page matches only with the same pages before it.
  std::vector<int32_t> d = tokens(64);
  d[0] = -2;
  EXPECT_EQ(start(pool, 4, d), 0);
}

TEST(PagePool, FreedPagesStayReusableUntilThePoolNeedsThem) {
  PagePool pool(8, 16);
  start(pool, 1, tokens(64));
  pool.close(1);
  EXPECT_EQ(pool.stats().cached, 4);
  EXPECT_EQ(start(pool, 2, tokens(70)), 64) << "a later request with the same prefix reuses the cached pages";
  pool.close(2);
  // Another sequence takes the whole pool: the cached pages are given out (oldest first) and forgotten.
  start(pool, 3, tokens(128, 100000));
  pool.close(3);
  EXPECT_EQ(start(pool, 4, tokens(70)), 0);
}

}  // namespace
