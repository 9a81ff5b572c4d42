// The graph builder's checks, the memory planner's invariants, the run config's errors
// and the JSON writer's strings.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <regex>

#include "common/error.hpp"
#include "common/json.hpp"
#include "config/run_config.hpp"
#include "graph/graph.hpp"
#include "runtime/memory_plan.hpp"

namespace {

using minfer::Error;
using minfer::GraphBuilder;

std::string error_of(const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "(no error)";
}

minfer::HostBytes zeros(uint64_t n) {
  auto v = std::make_shared<std::vector<uint8_t>>(n);
  return {v->data(), v->size(), v};
}

TEST(GraphBuilder, ShapeMismatchNamesNodeAndTensors) {
  GraphBuilder gb;
  const auto a = gb.input("a", MINFER_DTYPE_F32, {8, 2});
  const auto b = gb.input("b", MINFER_DTYPE_F32, {8, 3});
  const std::string msg = error_of([&] { gb.add("blk.0.sum", a, b); });
  EXPECT_NE(msg.find("blk.0.sum"), std::string::npos) << msg;
  EXPECT_NE(msg.find("add"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a f32[8, 2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("b f32[8, 3]"), std::string::npos) << msg;
}

TEST(GraphBuilder, RejectsPartialBlocksDuplicatesAndWrongTypes) {
  GraphBuilder gb;
  EXPECT_NE(error_of([&] { gb.weight("w", MINFER_DTYPE_Q4_0, {48, 2}, zeros(0)); }).find("multiple of q4_0's block of 32"),
            std::string::npos);
  const auto x = gb.input("x", MINFER_DTYPE_F32, {32});
  EXPECT_NE(error_of([&] { gb.input("x", MINFER_DTYPE_F32, {4}); }).find("used twice"), std::string::npos);
  EXPECT_NE(error_of([&] { gb.dequantize("dq", x); }).find("must be a block type"), std::string::npos);
  const auto ids = gb.input("ids", MINFER_DTYPE_F32, {3});
  const auto table = gb.weight("t", MINFER_DTYPE_Q8_0, {32, 4}, zeros(4 * 34));
  EXPECT_NE(error_of([&] { gb.get_rows("g", table, ids); }).find("1-D i32"), std::string::npos);
  EXPECT_NE(error_of([&] { gb.weight("w2", MINFER_DTYPE_F32, {4}, zeros(8)); }).find("its shape and dtype need 16"), std::string::npos);
  EXPECT_NE(error_of([&] { GraphBuilder().finish(); }).find("no output"), std::string::npos);
}

// Tensors alive at the same time never share bytes; sequential ones do.
TEST(MemoryPlan, NoOverlapWhileAliveAndReuseAfter) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<minfer::Lifetime> req;
    const int n = 1 + int(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const int64_t first = rng() % 50, len = rng() % 10;
      req.push_back({1 + rng() % 5000, first, first + len});
    }
    const minfer::ArenaPlan plan = minfer::plan_arena(req);
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(plan.offsets[i] % minfer::kArenaAlignment, 0u);
      ASSERT_LE(plan.offsets[i] + req[i].bytes, plan.size);
      for (int j = i + 1; j < n; ++j) {
        const bool alive_together = !(req[i].last < req[j].first || req[j].last < req[i].first);
        const bool overlap = plan.offsets[i] < plan.offsets[j] + req[j].bytes &&
                             plan.offsets[j] < plan.offsets[i] + req[i].bytes;
        ASSERT_FALSE(alive_together && overlap) << "trial " << trial << " requests " << i << ", " << j;
      }
    }
  }
  // A chain a -> b -> c -> d: each tensor dies when the next is made, so two slots suffice.
  const minfer::ArenaPlan chain = minfer::plan_arena({{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}, {1000, 3, 4}});
  EXPECT_EQ(chain.size, 2 * 1024u);
  EXPECT_EQ(chain.unshared, 4 * 1024u);
}

TEST(RunConfig, SyntaxErrorGivesFileLineColumn) {
  const std::string msg = error_of([] { minfer::parse_run_config("backends:\n  cpu: {\n  x: [1, 2\n", "run.yaml"); });
  EXPECT_NE(msg.find("run.yaml:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("YAML syntax error"), std::string::npos) << msg;
  EXPECT_TRUE(std::regex_search(msg, std::regex("run\\.yaml:[0-9]+:[0-9]+:"))) << msg;
}

TEST(RunConfig, UnknownKeyNamedWithItsLine) {
  const std::string msg = error_of([] { minfer::parse_run_config("backends:\n  cpu: {}\nplacment:\n  default: cpu\n", "c.yaml"); });
  EXPECT_NE(msg.find("c.yaml:3:1: unknown key 'placment'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("placement"), std::string::npos) << msg;  // lists what is expected
}

TEST(RunConfig, BadValuesAndMissingBackends) {
  EXPECT_NE(error_of([] { minfer::parse_run_config("backends:\n  cpu: {}\ndemo:\n  vocab: many\n", "c.yaml"); })
                .find("c.yaml:4:10: 'vocab' is 'many'; expected a positive integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { minfer::parse_run_config("backends:\n  cpu: {}\n  cuda: {}\n", "c.yaml"); })
                .find("say which is the default"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              minfer::parse_run_config("backends: {cpu: {}}\nplacement:\n  rules:\n    - {match: 'x', backend: gpu}\n", "c.yaml");
            }).find("c.yaml:4:29: rule sends nodes to backend 'gpu', which is not listed"),
            std::string::npos);
  EXPECT_NE(error_of([] { minfer::parse_run_config("job: demo\n", "c.yaml"); }).find("missing 'backends'"),
            std::string::npos);
  EXPECT_NE(error_of([] { minfer::load_run_config("/nonexistent/run.yaml"); }).find("cannot open"),
            std::string::npos);
}

TEST(RunConfig, BackendKeysSplitIntoCoreAndPluginOptions) {
  const auto cfg = minfer::parse_run_config(
      "backends:\n  cpu: {}\n  cuda: {device: 1, debug_sync: true}\nplacement: {default: cuda}\n", "c.yaml");
  ASSERT_NE(cfg.backend("cuda"), nullptr);
  EXPECT_EQ(cfg.backend("cuda")->device, 1);
  ASSERT_EQ(cfg.backend("cuda")->options.size(), 1u);
  EXPECT_EQ(cfg.backend("cuda")->options[0].first, "debug_sync");
  EXPECT_EQ(cfg.default_backend, "cuda");
}

}  // namespace

// Token pieces are often part of a character ("\xe5\xad" is two thirds of one); the
// trace and --json must still be valid JSON, so such bytes become U+FFFD (one per maximal
// ill-formed subpart: test_utf8.cpp).
TEST(Json, DumpKeepsValidUtf8AndReplacesBrokenBytes) {
  auto dump = [](const std::string &s) { return minfer::json::dump(minfer::json::Json(s)); };
  const std::string r = "\xef\xbf\xbd";  // U+FFFD
  EXPECT_EQ(dump("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
  EXPECT_EQ(dump("\xe5\xae\x9e\xe6\x88\x98"), "\"\xe5\xae\x9e\xe6\x88\x98\"");  // 实战
  EXPECT_EQ(dump("\xf0\x9f\x98\x80"), "\"\xf0\x9f\x98\x80\"");                  // an emoji
  EXPECT_EQ(dump("\xe5\xad"), "\"" + r + "\"");                                   // cut short: one subpart
  EXPECT_EQ(dump("x\x80y"), "\"x" + r + "y\"");                                   // stray continuation
  EXPECT_EQ(dump("\xc0\xaf"), "\"" + r + r + "\"");                               // overlong '/'
  EXPECT_EQ(dump("\xed\xa0\x80"), "\"" + r + r + r + "\"");                        // a surrogate
  EXPECT_EQ(dump(std::string("\x01", 1)), "\"\\u0001\"");
  EXPECT_EQ(minfer::json::dump(minfer::json::number(std::nan(""))), "null");
}
