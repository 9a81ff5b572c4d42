// Placement end to end: a node its backend cannot run fails the build (nothing runs anywhere
// else); nodes split across backends get explicit copies and compute the same result.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "demo_job.hpp"
#include "common/error.hpp"
#include "config/run_config.hpp"
#include "reference/ops.hpp"
#include "runtime/placement.hpp"
#include "runtime/session.hpp"
#include "cuda_available.hpp"
#include "models/model.hpp"
#include "runtime/plugin.hpp"
#include "synth/synth.hpp"

namespace {

std::string template_plugin() {
  const char *p = std::getenv("MINFER_TEMPLATE_PLUGIN");
  return p ? p : "";
}

std::vector<uint8_t> run_demo_graph(const std::string &yaml, std::string *explain = nullptr) {
  const minfer::RunConfig cfg = minfer::parse_run_config(yaml, "test.yaml");
  minfer::BackendSet backends = minfer::open_backends(cfg);
  const minfer::Graph g = minfer::app::build_demo_graph(cfg.demo);
  minfer::Session s(g, cfg, backends);
  if (explain) *explain = s.explain();
  std::vector<uint8_t> ids(cfg.demo.tokens.size() * 4);
  std::memcpy(ids.data(), cfg.demo.tokens.data(), ids.size());
  s.set_input("tokens", ids.data(), ids.size());
  s.run();
  return s.output("demo.out_f16");
}

// Outputs are f16: backends may differ from each other in silu's last f32 bit, which can move
// an f16 result by one step; nothing else may differ.
void expect_f16_close(const std::vector<uint8_t> &a, const std::vector<uint8_t> &b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i + 1 < a.size(); i += 2) {
    uint16_t x, y;
    std::memcpy(&x, &a[i], 2);
    std::memcpy(&y, &b[i], 2);
    ASSERT_LE(std::abs(int(x) - int(y)), 1) << "f16 value " << i / 2 << ": bits " << x << " vs " << y;
  }
}

std::string template_backend_yaml() {
  return "backends:\n  cpu: {}\n  template: {plugin: '" + template_plugin() + "'}\n";
}

TEST(Placement, UnsupportedNodeFailsTheBuildNamingEverything) {
  if (template_plugin().empty()) GTEST_SKIP() << "MINFER_TEMPLATE_PLUGIN is not set (ctest sets it after building the example)";
  const std::string yaml = template_backend_yaml() +
                           "placement:\n  default: cpu\n  rules:\n    - {match: 'demo.silu', backend: template}\n";
  try {
    run_demo_graph(yaml);
    FAIL() << "the build must fail: the template backend has no silu";
  } catch (const minfer::Error &e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("node 'demo.silu'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("op silu"), std::string::npos) << msg;
    EXPECT_NE(msg.find("demo.bias_add f32[64, 5] -> demo.silu f32[64, 5]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("backend 'template'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("implements only add, mul and attention"), std::string::npos) << msg;  // the backend's reason
    EXPECT_NE(msg.find("placement rule 'demo.silu'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("never moves a node"), std::string::npos) << msg;
  }
}

TEST(Placement, SplitAcrossBackendsInsertsCopiesAndMatchesOneBackend) {
  if (template_plugin().empty()) GTEST_SKIP() << "MINFER_TEMPLATE_PLUGIN is not set (ctest sets it after building the example)";
  const auto cpu_only = run_demo_graph("backends: {cpu: {}}\n");
  std::string explain;
  const auto mixed = run_demo_graph(template_backend_yaml() +
                                        "placement:\n  default: cpu\n  rules:\n"
                                        "    - {match: 'demo.gate', backend: template}\n"
                                        "    - {match: 'demo.residual', backend: template}\n",
                                    &explain);
  EXPECT_EQ(mixed, cpu_only);  // the same CPU kernels plus exact add/mul
  // gate reads silu and bias_add from the cpu; residual reads embed; out_f16 reads residual back.
  EXPECT_NE(explain.find("copies inserted: 4"), std::string::npos) << explain;
  EXPECT_NE(explain.find("copy demo.silu: cpu -> template"), std::string::npos) << explain;
  EXPECT_NE(explain.find("copy demo.residual: template -> cpu"), std::string::npos) << explain;
  EXPECT_NE(explain.find("through host memory"), std::string::npos) << explain;  // two plugins
  EXPECT_EQ(explain.find("device to device"), std::string::npos) << explain;
  EXPECT_NE(explain.find("demo.gate                    mul                template"), std::string::npos) << explain;
}

TEST(Placement, CudaAndCpuSplitMatchesCpu) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const std::string demo = "demo: {tokens: [0, 15, 7, 7, 3, 9], vocab: 16, dim: 256}\n";
  const auto cpu_only = run_demo_graph("backends: {cpu: {}}\n" + demo);
  std::string explain;
  const auto mixed = run_demo_graph("backends: {cpu: {}, cuda: {}}\nplacement:\n  default: cuda\n  rules:\n"
                                    "    - {match: 'demo.silu', backend: cpu}\n" + demo, &explain);
  expect_f16_close(mixed, cpu_only);
  EXPECT_NE(explain.find("copy demo.bias_add: cuda -> cpu"), std::string::npos) << explain;
  EXPECT_NE(explain.find("copy demo.silu: cpu -> cuda"), std::string::npos) << explain;
}

// Several backends of one plugin, named freely (`cpu1: {plugin: cpu}`): one library, two
// instances, placement by their names, and the copies between them as between any two.
TEST(Placement, TwoBackendsOfOnePluginMatchOne) {
  const std::string demo = "demo: {tokens: [0, 15, 7, 7, 3, 9], vocab: 16, dim: 256}\n";
  const auto one = run_demo_graph("backends: {cpu: {}}\n" + demo);
  std::string explain;
  const auto two = run_demo_graph("backends: {cpu0: {plugin: cpu, threads: 1}, cpu1: {plugin: cpu, threads: 1}}\nplacement:\n  default: cpu0\n"
                                  "  rules:\n    - {match: 'demo.silu', backend: cpu1}\n" + demo, &explain);
  EXPECT_EQ(two, one);
  // One plugin's backends copy between themselves (ABI 1.8 buffer_copy), not through the host.
  EXPECT_NE(explain.find("copy demo.bias_add: cpu0 -> cpu1 (6.0 KiB, device to device)"), std::string::npos) << explain;
  EXPECT_NE(explain.find("copy demo.silu: cpu1 -> cpu0 (6.0 KiB, device to device)"), std::string::npos) << explain;
  // A device the plugin does not have fails the build naming the backend that asked.
  try {
    run_demo_graph("backends: {cpu0: {plugin: cpu}, cpu7: {plugin: cpu, device: 7}}\nplacement: {default: cpu0}\n" + demo);
    ADD_FAILURE() << "a missing device opened";
  } catch (const minfer::Error &e) {
    EXPECT_NE(std::string(e.what()).find("backend 'cpu7' asks for device 7, but the plugin sees 1 device(s)"), std::string::npos) << e.what();
  }
  // A plugin name that is none is refused with where it looked.
  try {
    run_demo_graph("backends: {gpu9: {plugin: nosuchplugin}}\n" + demo);
    ADD_FAILURE() << "an unknown plugin opened";
  } catch (const minfer::Error &e) {
    EXPECT_NE(std::string(e.what()).find("libminfer_backend_nosuchplugin.so not found"), std::string::npos) << e.what();
  }
}

TEST(Placement, MissingDeviceIsABuildError) {
  const std::string msg = [] {
    try {
      run_demo_graph("backends: {cpu: {device: 2}}\n");
    } catch (const minfer::Error &e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  }();
  EXPECT_NE(msg.find("backend 'cpu' asks for device 2, but the plugin sees 1 device(s)"), std::string::npos) << msg;
}

TEST(Placement, DemoOnCpuMatchesReference) {
  const minfer::RunConfig cfg = minfer::parse_run_config("backends: {cpu: {}}\n", "t.yaml");
  const minfer::Graph g = minfer::app::build_demo_graph(cfg.demo);
  std::vector<uint8_t> ids(cfg.demo.tokens.size() * 4);
  std::memcpy(ids.data(), cfg.demo.tokens.data(), ids.size());
  const auto ref = minfer::reference::evaluate(g, {{"tokens", ids}});
  expect_f16_close(run_demo_graph("backends: {cpu: {}}\n"), ref.at("demo.out_f16"));
}

}  // namespace

// A node output read only inside its segment is marked for fusion; one read by another
// segment, or by the host, is not.
TEST(Placement, SegmentLocalOutputsAreThoseOnlyTheSegmentReads) {
  minfer::GraphBuilder g;
  const auto w = g.input("w", MINFER_DTYPE_Q4_0, {64, 16}), x = g.input("x", MINFER_DTYPE_F32, {64, 3});
  const auto bias = g.input("bias", MINFER_DTYPE_F32, {16});
  const auto prod = g.matmul("prod", w, x);                 // node 0: read by node 1 only
  const auto biased = g.add_row_broadcast("biased", prod, bias);  // node 1: read by nodes 2 and 3
  const auto twice = g.add("twice", biased, biased);       // node 2: a graph output
  const auto more = g.add("more", biased, twice);          // node 3
  g.mark_output(twice);
  g.mark_output(more);
  const minfer::Graph graph = g.finish();
  const auto ids = [&](std::initializer_list<const char *> names) {
    std::set<minfer::TensorId> s;
    for (const char *n : names) s.insert(graph.find_tensor(n));
    return s;
  };
  EXPECT_EQ(minfer::segment_local_outputs(graph, {0, 1, 2, 3}), ids({"prod", "biased"}));
  // Node 3 on another backend: "biased" leaves the segment {0, 1, 2}.
  EXPECT_EQ(minfer::segment_local_outputs(graph, {0, 1, 2}), ids({"prod"}));
  EXPECT_EQ(minfer::segment_local_outputs(graph, {1, 2, 3}), ids({"biased"}));
  EXPECT_TRUE(minfer::segment_local_outputs(graph, {0}).empty());
}

namespace {

// The --explain report of a synthetic Qwen2 (tiny, Q4_0; its tied output is Q6_K) on `backends`.
std::string explain_tiny(const std::string &backends, const std::string &arch = "qwen2", const std::string &type = "q4_0",
                         int64_t max_batch = 64) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / ("minfer-explain-tiny-" + arch + "-" + type + ".gguf");
  minfer::synth::Options o;
  o.arch = arch, o.preset = "tiny", o.type = type, o.seed = 5, o.out = path.string();
  minfer::synth::synthesize(o);
  auto file = minfer::gguf::File::open(path.string());
  minfer::models::BuildOptions bo;
  bo.n_ctx = 256;
  bo.max_batch = max_batch;
  const auto model = minfer::models::load_model(file, bo);
  const minfer::RunConfig cfg = minfer::parse_run_config(backends, "test.yaml");
  minfer::BackendSet set = minfer::open_backends(cfg);
  minfer::Session session(model->graph, cfg, set);
  return session.explain();
}

// The two lines ("1: ..." and "64: ...", or the step size asked) the kernels section gives node `name`; "" when absent.
std::string kernel_lines(const std::string &explain, const std::string &name) {
  const size_t section = explain.find("kernels (per node");
  if (section == std::string::npos) return "";
  const size_t at = explain.find("\n  " + name + " ", section);
  if (at == std::string::npos) return "";
  const size_t second = explain.find('\n', explain.find('\n', at + 1) + 1);
  return explain.substr(at + 1, second == std::string::npos ? std::string::npos : second - at - 1);
}

}  // namespace

// --explain says which kernel each matmul takes, for a decode token and for a prompt.
TEST(Explain, CpuNamesEachMatmulsKernel) {
  const std::string e = explain_tiny("backends: {cpu: {isa: scalar}}\n");
  EXPECT_NE(e.find("kernels (per node, for a step of 1 token and of 64):"), std::string::npos) << e;
  const std::string q = kernel_lines(e, "blk.0.attn_q");
  EXPECT_NE(q.find("1: scalar int8 dot products on the q4_0 blocks"), std::string::npos) << e;
  EXPECT_NE(q.find("64: scalar int8 dot products on the q4_0 blocks"), std::string::npos) << e;
  EXPECT_NE(e.find("on the q6_k blocks"), std::string::npos) << "the tied output matmul\n" << e;
  EXPECT_EQ(kernel_lines(e, "blk.0.attn_norm"), "") << "ops without a choice of kernel stay out of the list\n" << e;
}

// Without AMX, Q4_0 matmul weights are repacked into panels in the backend's own copy; with
// the weights read in place from the file they stay rows.
TEST(Explain, CpuNamesQ4_0PanelsWhereItRepacks) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "this CPU has no AVX2";
  const std::string e = explain_tiny("backends: {cpu: {isa: avx2}}\n");
  const std::string q = kernel_lines(e, "blk.0.ffn_down");
  EXPECT_NE(q.find("1: avx2 int8 dot products on q4_0 weights repacked at load into 16-row panels"), std::string::npos) << e;
  EXPECT_NE(q.find("64: avx2 int8 dot products on q4_0 weights repacked at load into 16-row panels"), std::string::npos) << e;
  const std::string mapped = explain_tiny("backends: {cpu: {isa: avx2, weights: mapped}}\n");
  EXPECT_NE(kernel_lines(mapped, "blk.0.ffn_down").find("1: avx2 int8 dot products on the q4_0 blocks"), std::string::npos) << mapped;
  // Q4_K too (a Q4_K_M file's matmuls); Q6_K under AVX-512 only.
  const std::string k = explain_tiny("backends: {cpu: {isa: avx2}}\n", "qwen2", "q4_k_m");
  EXPECT_NE(k.find("avx2 int8 dot products on q4_k weights repacked at load into 16-row panels"), std::string::npos) << k;
  EXPECT_NE(k.find("avx2 int8 dot products on the q6_k blocks"), std::string::npos) << k;
  // Q5_0 and Q5_1 (a small Qwen's Q4_K_M and Q5_K_M files hold their 896-wide matmuls so) and Q4_1 as Q4_0.
  for (const char *type : {"q5_0", "q5_1", "q4_1"}) {
    const std::string q5 = explain_tiny("backends: {cpu: {isa: avx2}}\n", "qwen2", type);
    EXPECT_NE(kernel_lines(q5, "blk.0.ffn_down").find(std::string("1: avx2 int8 dot products on ") + type + " weights repacked at load into 16-row panels"),
              std::string::npos) << q5;
  }
  // Q2_K and Q3_K (rows decoded to f32 before): row dots on the GEMM's units for a token, the
  // tiled GEMM for a prompt.
  for (const char *type : {"q2_k", "q3_k"}) {
    const std::string lo = explain_tiny("backends: {cpu: {isa: avx2}}\n", "qwen2", type);
    const std::string line = kernel_lines(lo, "blk.0.ffn_down");
    EXPECT_NE(line.find(std::string("1: avx2 int8 dot products on the ") + type + " blocks"), std::string::npos) << lo;
    EXPECT_NE(line.find(std::string("64: avx2 tiled int8 GEMM (") + type + " weights"), std::string::npos) << lo;
  }
  // IQ4_NL and IQ4_XS in panels at every isa (AVX2 on the table's signed values).
  for (const char *type : {"iq4_nl", "iq4_xs"}) {
    const std::string iq = explain_tiny("backends: {cpu: {isa: avx2}}\n", "qwen2", type);
    EXPECT_NE(kernel_lines(iq, "blk.0.ffn_down").find(std::string("1: avx2 int8 dot products on ") + type + " weights repacked at load into 16-row panels"),
              std::string::npos) << iq;
  }
  // Q8_0: rows under AVX2 (its values + 128 would saturate vpmaddubsw), panels under AVX-512.
  const std::string q8 = explain_tiny("backends: {cpu: {isa: avx2}}\n", "qwen2", "q8_0");
  EXPECT_EQ(q8.find("q8_0 weights repacked at load"), std::string::npos) << q8;
  if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw")) return;
  const std::string v = explain_tiny("backends: {cpu: {isa: avx512vnni}}\n", "qwen2", "q4_k_m");
  EXPECT_NE(v.find("avx512vnni int8 dot products on q6_k weights repacked at load into 16-row panels"), std::string::npos) << v;
  const std::string v8 = explain_tiny("backends: {cpu: {isa: avx512vnni}}\n", "qwen2", "q8_0");
  EXPECT_NE(kernel_lines(v8, "blk.0.ffn_down").find("1: avx512vnni int8 dot products on q8_0 weights repacked at load into 16-row panels"),
            std::string::npos) << v8;
}

TEST(Explain, CudaNamesPathsAndFusions) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  // Prompt-sized steps of 128 tokens: past the few-token matmul's 2..64, so MMQ: Q4_0, Q8_0
  // and the K-quants on f16 tensor cores, the other int8 types (Q5_0 here) on int8 ones.
  // mmq_wgmma: false (the default) names mma.sync's kernel on any GPU (wgmma's below, on Hopper).
  const char *sync = "backends: {cuda: {mmq_wgmma: false}}\n";
  const std::string e = explain_tiny(sync, "qwen2", "q4_0", 128);
  const std::string q = kernel_lines(e, "blk.0.attn_q");
  EXPECT_NE(q.find("1: gemv_quantizing_kernel: dp4a on the q4_0 blocks"), std::string::npos) << e;
  EXPECT_NE(q.find("one launch with blk.0.attn_k and blk.0.attn_v"), std::string::npos) << e;
  EXPECT_NE(q.find("128: convert_f32_f16_kernel + mmq_f16_kernel: f16 tensor cores (mma.m16n8k16), the q4_0 blocks dequantized in registers"),
            std::string::npos) << e;
  EXPECT_NE(kernel_lines(e, "blk.0.attn_k").find("1: inside the kernel of blk.0.attn_q"), std::string::npos) << e;
  // The lm_head's 151,936 short rows (256 values) stream through the staged kernel's rings.
  EXPECT_NE(kernel_lines(e, "logits").find("1: gemv_staged_kernel: dp4a on the"), std::string::npos) << e;
  EXPECT_NE(kernel_lines(e, "blk.0.ffn_gate").find("1: gemv_quantizing_kernel: gate, up and SwiGLU in one launch"), std::string::npos)
      << e;
  EXPECT_NE(kernel_lines(e, "blk.0.ffn_gate").find("128: convert_f32_f16_kernel + mmq_f16_kernel: gate, up and SwiGLU in one launch"),
            std::string::npos) << e;
  const std::string q5 = explain_tiny("backends: {cuda: {}}\n", "qwen2", "q5_0", 128);
  EXPECT_NE(kernel_lines(q5, "blk.0.attn_q").find("128: mmq_kernel: int8 tensor cores"), std::string::npos) << q5;
  EXPECT_NE(kernel_lines(q5, "blk.0.ffn_gate").find("128: mmq_kernel: gate, up and SwiGLU in one launch"), std::string::npos) << q5;
  // Q2_K and Q3_K decode on the dp4a GEMV too (a matmul_kernel at ~80 GB/s before); Q3_K
  // prompts take MMQ, Q2_K's (minima per 16 values) the f16 GEMM.
  for (const char *type : {"q2_k", "q3_k"}) {
    const std::string lo = explain_tiny("backends: {cuda: {}}\n", "qwen2", type, 128);
    const std::string down = kernel_lines(lo, "blk.0.ffn_down");
    EXPECT_NE(down.find(std::string("1: gemv_quantizing_kernel: dp4a on the ") + type + " blocks"), std::string::npos) << lo;
    EXPECT_NE(down.find(std::string("128: ") + (type == std::string("q3_k") ? "mmq_kernel" : "dequantized to f16 per call + f16 tensor-core GEMM")),
              std::string::npos) << lo;
  }
  // K-quant prompts likewise, gate and up in one launch; mmq_f16: false keeps int8 MMQ.
  const std::string km = explain_tiny(sync, "qwen2", "q4_k_m", 128);
  EXPECT_NE(kernel_lines(km, "blk.0.ffn_gate").find("128: convert_f32_f16_kernel + mmq_f16_kernel: gate, up and SwiGLU in one launch"),
            std::string::npos) << km;
  EXPECT_NE(kernel_lines(km, "blk.0.attn_q").find("128: convert_f32_f16_kernel + mmq_f16_kernel: f16 tensor cores"), std::string::npos) << km;
  const std::string ki = explain_tiny("backends: {cuda: {mmq_f16: false}}\n", "qwen2", "q4_k_m", 128);
  EXPECT_NE(kernel_lines(ki, "blk.0.attn_q").find("128: mmq_kernel: int8 tensor cores"), std::string::npos) << ki;
  // mmq_wgmma on Hopper (compute capability 9.0, the sm_90a code): the same kernel on warpgroup
  // MMA, x converted in its k order.
  const auto plugin = minfer::find_plugin("cuda", "", minfer::plugin_search_dirs(""));
  const std::string gpu = plugin->device_info(0).name;
  if (gpu.find("H100") != std::string::npos || gpu.find("H200") != std::string::npos || gpu.find("H800") != std::string::npos) {
    const std::string wk = explain_tiny("backends: {cuda: {mmq_wgmma: true}}\n", "qwen2", "q4_k_m", 128);
    EXPECT_NE(kernel_lines(wk, "blk.0.attn_q")
                  .find("128: convert_f32_f16_mma_order_kernel + mmq_f16_kernel: f16 tensor cores (warpgroup MMA (wgmma.m64n128k16)), the q4_k "
                        "blocks dequantized in registers"),
              std::string::npos) << wk;
    EXPECT_NE(kernel_lines(wk, "blk.0.ffn_gate").find("128: convert_f32_f16_mma_order_kernel + mmq_f16_kernel: gate, up and SwiGLU in one launch"),
              std::string::npos) << wk;
  }
  // Gemma's GELU-gated FFN fuses the same way.
  const std::string g = explain_tiny(sync, "gemma2", "q4_0", 128);
  EXPECT_NE(kernel_lines(g, "blk.0.ffn_gate").find("1: gemv_quantizing_kernel: gate, up and GeGLU in one launch"), std::string::npos) << g;
  EXPECT_NE(kernel_lines(g, "blk.0.ffn_gate").find("128: convert_f32_f16_kernel + mmq_f16_kernel: gate, up and GeGLU in one launch"),
            std::string::npos) << g;
  const std::string q128 = q.substr(std::min(q.find("128: "), q.size()));  // the prompt-sized step's line
  EXPECT_NE(q128.find("one launch with blk.0.attn_k and blk.0.attn_v"), std::string::npos) << e;
  const std::string at = kernel_lines(e, "blk.0.attn");
  EXPECT_NE(at.find("1: flash_decode_kernel (writes the KV row, rotates q and k)"), std::string::npos) << e;
  EXPECT_NE(at.find("128: kv_write_kernel + flash_attention_tc_kernel"), std::string::npos) << e;
  EXPECT_NE(kernel_lines(e, "blk.0.attn_q_rope").find("1: inside the kernel of blk.0.attn"), std::string::npos) << e;
  EXPECT_NE(q.find("the RMS norm blk.0.attn_norm folded in"), std::string::npos) << e;
  const std::string norm = kernel_lines(e, "blk.0.attn_norm");
  EXPECT_NE(norm.find("1: inside the kernel of blk.0.attn_q"), std::string::npos) << e;
  EXPECT_NE(norm.find("128: a kernel of the step at blk.0.attn_q"), std::string::npos) << e;
  // Qwen3-MoE: the per-head q/k norms fused, also where the host gives a rope output its norm's
  // input bytes and the attention output q's (it does here: those inputs die there). A decode
  // token: norms, rope and attention in the one-token attention kernel; a 64-token step: norms
  // inside the RoPE pair's launch. The routed FFN's three launches for a decode token as
  // moe_ffn_fused: false keeps them (the one-launch form below).
  const std::string m = explain_tiny("backends: {cuda: {moe_ffn_fused: false}}\n", "qwen3moe", "q4_0");
  EXPECT_NE(kernel_lines(m, "blk.0.attn_q_norm").find("1: inside the kernel of blk.0.attn\n"), std::string::npos) << m;
  EXPECT_NE(kernel_lines(m, "blk.0.attn_q_norm").find("64: inside the kernel of blk.0.attn_q_rope"), std::string::npos) << m;
  EXPECT_NE(kernel_lines(m, "blk.0.attn").find("1: flash_decode_kernel (writes the KV row, rotates q and k, each head RMS-normalized first)"),
            std::string::npos) << m;
  EXPECT_NE(kernel_lines(m, "blk.0.attn_q_rope").find("64: rope_f32_kernel (the pair in one launch, each head RMS-normalized first)"),
            std::string::npos) << m;
  EXPECT_NE(kernel_lines(m, "blk.0.ffn_gate_exps").find("1: mmvq_id_decode_kernel"), std::string::npos) << m;
  // staged_expert_pairs: a decode token's gate/up experts through the staged GEMV's rings; a
  // prompt's keep the routed kernel.
  const std::string st = explain_tiny("backends: {cuda: {staged_expert_pairs: true}}\n", "qwen3moe", "q4_0");
  EXPECT_NE(kernel_lines(st, "blk.0.ffn_gate_exps").find("1: gemv_staged_experts_kernel"), std::string::npos) << st;
  EXPECT_NE(kernel_lines(st, "blk.0.ffn_gate_exps").find("64: mmvq_id_kernel"), std::string::npos) << st;
  // The down experts, their weighted sum and its residual add: one launch for a decode token.
  EXPECT_NE(kernel_lines(m, "blk.0.ffn_down_exps").find("1: mmvq_id_sum_decode_kernel"), std::string::npos) << m;
  EXPECT_NE(kernel_lines(m, "blk.0.ffn_down_exps").find("64: mmvq_id_kernel"), std::string::npos) << m;
  EXPECT_NE(kernel_lines(m, "blk.0.ffn_sum_exps").find("1: inside the kernel of blk.0.ffn_down_exps\n"), std::string::npos) << m;
  // So in a one-token build (minfer-bench -p 0): the memory plan keeps the down experts' inputs
  // apart from the sum's and the add's outputs, which the arena had put over them there.
  const std::string one = explain_tiny("backends: {cuda: {moe_ffn_fused: false}}\n", "qwen3moe", "q4_0", 1);
  EXPECT_NE(kernel_lines(one, "blk.0.ffn_down_exps").find("1: mmvq_id_sum_decode_kernel"), std::string::npos) << one;
  EXPECT_NE(kernel_lines(one, "blk.0.ffn_down_exps").find("the residual add too"), std::string::npos) << one;
  // Its router: for a decode token the FFN's RMS norm, the f32 router matmul, the top-k and the
  // expert weights in one launch; a prompt runs them in turn (the top-k with its weights).
  EXPECT_NE(kernel_lines(m, "blk.0.ffn_norm").find("1: moe_router_decode_kernel: the RMS norm, the router blk.0.ffn_moe_logits"),
            std::string::npos) << m;
  for (const char *node : {"blk.0.ffn_moe_logits", "blk.0.ffn_moe_topk", "blk.0.ffn_moe_weights"})
    EXPECT_NE(kernel_lines(m, node).find("1: inside the kernel of blk.0.ffn_norm\n"), std::string::npos) << node << "\n" << m;
  EXPECT_NE(kernel_lines(m, "blk.0.ffn_moe_logits").find("64: plain_matmul_kernel"), std::string::npos) << m;
  EXPECT_NE(kernel_lines(m, "blk.0.ffn_moe_topk").find("64: top_k_rank_kernel (a thread an expert), the expert weights in the same launch"),
            std::string::npos) << m;
  EXPECT_NE(kernel_lines(m, "blk.0.ffn_moe_weights").find("64: inside the kernel of blk.0.ffn_moe_topk"), std::string::npos) << m;
  // With moe_ffn_fused a decode token's whole routed FFN is one launch (also in a one-token build,
  // whose arena reuses bytes the most); a 64-token step keeps its steps.
  for (const int64_t tokens : {int64_t(64), int64_t(1)}) {
    const std::string f = explain_tiny("backends: {cuda: {moe_ffn_fused: true}}\n", "qwen3moe", "q4_0", tokens);
    EXPECT_NE(kernel_lines(f, "blk.0.ffn_norm").find("1: ffn_decode_kernel: the RMS norm, the router blk.0.ffn_moe_logits, its top-k and "
                                                       "weights, the gate/up experts (q4_0) with SwiGLU, the down experts (q4_0) and their "
                                                       "weighted sum with the residual add in one launch"),
              std::string::npos) << f;
    for (const char *node : {"blk.0.ffn_moe_logits", "blk.0.ffn_moe_topk", "blk.0.ffn_moe_weights", "blk.0.ffn_gate_exps", "blk.0.ffn_up_exps",
                             "blk.0.ffn_glu_exps", "blk.0.ffn_down_exps", "blk.0.ffn_sum_exps"})
      EXPECT_NE(kernel_lines(f, node).find("1: inside the kernel of blk.0.ffn_norm\n"), std::string::npos) << node << "\n" << f;
    if (tokens == 64) EXPECT_NE(kernel_lines(f, "blk.0.ffn_down_exps").find("64: mmvq_id_kernel"), std::string::npos) << f;
  }
  // With dense_ffn_fused a decode token's dense FFN is one launch: its norm, gate, up, SwiGLU,
  // down and residual add (also in a one-token build); a 64-token step keeps its steps.
  for (const int64_t tokens : {int64_t(64), int64_t(1)}) {
    const std::string d = explain_tiny("backends: {cuda: {dense_ffn_fused: true}}\n", "qwen2", "q4_k_m", tokens);
    EXPECT_NE(kernel_lines(d, "blk.0.ffn_gate").find("1: ffn_decode_kernel: the RMS norm blk.0.ffn_norm, gate/up (q4_k) with SwiGLU, down (q4_k) "
                                                     "with the residual add in one launch"),
              std::string::npos) << d;
    for (const char *node : {"blk.0.ffn_norm", "blk.0.ffn_up", "blk.0.ffn_swiglu", "blk.0.ffn_down", "blk.0.ffn_residual"})
      EXPECT_NE(kernel_lines(d, node).find("1: inside the kernel of blk.0.ffn_gate\n"), std::string::npos) << node << "\n" << d;
    if (tokens == 64) EXPECT_EQ(kernel_lines(d, "blk.0.ffn_gate").find("64: ffn_decode_kernel"), std::string::npos) << d;
  }
  // With attn_out_fused too the attention's output projection and its residual add are the
  // launch's first stage, dense and routed; a 64-token step keeps its steps.
  const std::string od = explain_tiny("backends: {cuda: {dense_ffn_fused: true, attn_out_fused: true}}\n", "qwen2", "q4_k_m", 64);
  EXPECT_NE(kernel_lines(od, "blk.0.attn_output").find("1: ffn_decode_kernel: the output projection (q4_k) with the residual add "
                                                       "blk.0.attn_residual, then the RMS norm blk.0.ffn_norm, gate/up (q4_k)"),
            std::string::npos) << od;
  for (const char *node : {"blk.0.attn_residual", "blk.0.ffn_norm", "blk.0.ffn_gate", "blk.0.ffn_down", "blk.0.ffn_residual"})
    EXPECT_NE(kernel_lines(od, node).find("1: inside the kernel of blk.0.attn_output\n"), std::string::npos) << node << "\n" << od;
  EXPECT_EQ(kernel_lines(od, "blk.0.attn_output").find("64: ffn_decode_kernel"), std::string::npos) << od;
  const std::string om = explain_tiny("backends: {cuda: {moe_ffn_fused: true, attn_out_fused: true}}\n", "qwen3moe", "q4_0", 1);
  EXPECT_NE(kernel_lines(om, "blk.0.attn_output").find("1: ffn_decode_kernel: the output projection (q4_0) with the residual add "
                                                       "blk.0.attn_residual, then the RMS norm, the router blk.0.ffn_moe_logits"),
            std::string::npos) << om;
  for (const char *node : {"blk.0.attn_residual", "blk.0.ffn_norm", "blk.0.ffn_moe_topk", "blk.0.ffn_down_exps"})
    EXPECT_NE(kernel_lines(om, node).find("1: inside the kernel of blk.0.attn_output\n"), std::string::npos) << node << "\n" << om;
  // Batched decode steps up to 64 tokens: the few-token tensor-core matmul, gate and up in one launch.
  const std::string b = explain_tiny("backends: {cuda: {}}\n");
  const auto line64 = [&](const std::string &name) { const std::string l = kernel_lines(b, name); return l.substr(std::min(l.find("64: "), l.size())); };
  EXPECT_NE(line64("blk.0.ffn_gate").find("few_token_mma_kernel: gate, up and SwiGLU in one launch"), std::string::npos) << b;
  EXPECT_NE(line64("blk.0.attn_q").find("few_token_mma_kernel: int8 tensor cores"), std::string::npos) << b;
}
