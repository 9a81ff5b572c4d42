// apps/minfer-bench — prompt-processing and generation speed, the way llama-bench measures it.
//   minfer-bench -m MODEL.gguf [--config RUN.yaml] [-p 512,...] [-n 128,...] [-d 0,...] [-r 5] [-t THREADS] [--json]
// pp: p prompt tokens fed after d tokens already in the cache; tg: n single-token steps after
// d tokens (d = 0: an empty cache). Every p and every n runs at every d, the depth's tokens
// fed again before each repetition and not timed. One warm-up run of each test is not
// counted; mean ± sd over -r repetitions.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/json.hpp"
#include "common/log.hpp"
#include "config/run_config.hpp"
#include "minfer/dtype.h"
#include "batched_bench.hpp"
#include "op_bench.hpp"
#include "models/model.hpp"
#include "runtime/generator.hpp"
#include "runtime/placement.hpp"
#include "runtime/session.hpp"

namespace {

const char *kUsage =
    "usage: minfer-bench -m MODEL.gguf [--config RUN.yaml] [-p N,...] [-n N,...] [-d N,...] [-r N] [-t THREADS] [--json]\n"
    "       minfer-bench --op matmul --type TYPE -k K --rows M --tokens N [--copies C] [--config RUN.yaml] [-r N]\n"
    "       minfer-bench --op attention --heads H --kv-heads G --head-dim D -d DEPTH --tokens N [--kv-type f16|f32] [--copies C] [--config RUN.yaml] [-r N]\n"
    "       minfer-bench -m MODEL.gguf --parallel 1,4,16,64 [--npp 512] [--ntg 128] [-b N] [--config RUN.yaml] [--json]\n"
    "  --parallel B,...  many sequences at once (continuous batching), as llama-batched-bench prints it:\n"
    "                 B sequences of --npp random prompt tokens each generate --ntg tokens; -b: tokens per\n"
    "                 step at most (default min(B * npp, 8192))\n"
    "  --op matmul    time one matmul alone on the config's first backend: y (N x M) = W (M x K,\n"
    "                 of TYPE: f32, f16, q4_0, q8_0, q4_k, ...) x (N x K); -r calls (default 20), each\n"
    "                 on the next of C copies of W (default: 512 MB of them, at most 64), so every\n"
    "                 call reads W from memory; --copies 1 measures a W the caches hold\n"
    "  --op attention time one attention alone: N new tokens of one sequence over a paged KV cache\n"
    "                 DEPTH positions deep (a decode step: --tokens 1), H query and G KV heads of D\n"
    "                 values (default 14 / 2 / 64, Qwen2-0.5B's, -d 4096); copies of the cache as W's\n"
    "  -m FILE        model to measure\n"
    "  --config FILE  backends, placement and options (default: the cpu backend)\n"
    "  -p N,...       prompt tokens of each pp test (default 512; 0 skips it)\n"
    "  -n N,...       generated tokens of each tg test (default 128; 0 skips it)\n"
    "  -d, --n-depth N,...  tokens already in the cache before each test (default 0), shown as\n"
    "                 'tg128 @ d4096'; every -p and -n runs at every depth\n"
    "  -r N           repetitions (default 5)\n"
    "  -t N           cpu threads (default: all cores)\n"
    "  --kv-type T    f16 (default) or f32\n"
    "  --json         JSON instead of a Markdown table\n";

// "1,4,16" -> {1, 4, 16}, each in [lo, hi]; the flag names itself in the error.
std::vector<int64_t> parse_counts(const std::string &flag, const std::string &list, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception &) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < lo || v > hi)
      throw minfer::Error(flag + " takes a comma-separated list of counts from " + std::to_string(lo) + " to " + std::to_string(hi) +
                          ", not '" + list + "'");
    out.push_back(v);
    at = comma + 1;
  }
  return out;
}

struct Result {
  std::string test;   // "pp512", "tg128 @ d4096"
  bool pp;
  int64_t tokens, depth;
  int64_t n_kv = 0;  // positions in the cache when a repetition ended: depth + tokens
  std::vector<double> tps;
  double mean() const {
    double s = 0;
    for (double x : tps) s += x;
    return s / double(tps.size());
  }
  double sd() const {
    if (tps.size() < 2) return 0;
    const double m = mean();
    double s = 0;
    for (double x : tps) s += (x - m) * (x - m);
    return std::sqrt(s / double(tps.size() - 1));
  }
};

}  // namespace

int main(int argc, char **argv) {
  try {
    minfer::init_logging(spdlog::level::warn);
    std::string model_path, config_path, threads, kv = "f16";
    std::vector<int64_t> ps = {512}, ns = {128}, depths = {0};
    int64_t reps = 5;
    bool as_json = false, reps_given = false, depth_given = false;
    minfer::bench::OpBenchSpec op;
    bool op_mode = false, batched = false;
    minfer::bench::BatchedSpec bs;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw minfer::Error(a + " needs a value\n" + kUsage);
        return argv[++i];
      };
      if (a == "-m") model_path = value();
      else if (a == "--config") config_path = value();
      else if (a == "-p") ps = parse_counts(a, value(), 0, int64_t(1) << 24);
      else if (a == "-n") ns = parse_counts(a, value(), 0, int64_t(1) << 24);
      else if (a == "-d" || a == "--n-depth") depths = parse_counts(a, value(), 0, int64_t(1) << 24), depth_given = true;
      else if (a == "-r") reps = std::stoll(value()), reps_given = true;
      else if (a == "--op") op.op = value(), op_mode = true;
      else if (a == "--parallel" || a == "-np") {
        batched = true;
        bs.parallel = parse_counts(a, value(), 1, 1024);
      }
      else if (a == "--npp") bs.npp = std::stoll(value());
      else if (a == "--ntg") bs.ntg = std::stoll(value());
      else if (a == "-b") bs.batch = std::stoll(value());
      else if (a == "--type") op.type = value();
      else if (a == "-k") op.k = std::stoll(value());
      else if (a == "--rows") op.rows = std::stoll(value());
      else if (a == "--tokens") op.tokens = std::stoll(value());
      else if (a == "--copies") op.copies = std::stoll(value());
      else if (a == "--heads") op.heads = std::stoll(value());
      else if (a == "--kv-heads") op.kv_heads = std::stoll(value());
      else if (a == "--head-dim") op.head_dim = std::stoll(value());
      else if (a == "-t") threads = value();
      else if (a == "--kv-type") kv = value();
      else if (a == "--json") as_json = true;
      else if (a == "-h" || a == "--help") return std::fputs(kUsage, stdout), 0;
      else throw minfer::Error("unknown argument '" + a + "'\n" + kUsage);
    }
    if (op_mode) {
      if (reps_given) op.reps = reps;
      op.kv_type = kv;
      if (depth_given) {
        if (depths.size() != 1) throw minfer::Error("--op attention takes one depth (-d N)");
        op.depth = depths.front();
      }
      const minfer::RunConfig cfg = config_path.empty() ? minfer::parse_run_config("backends: {cpu: {}}\n", "(default: cpu)")
                                                        : minfer::load_run_config(config_path);
      const minfer::bench::OpBenchResult r = minfer::bench::run_op_bench(op, cfg);
      if (op.op == "attention") {
        std::printf("attention %s heads=%lld/%lld head_dim=%lld depth=%lld tokens=%lld on %s: %.1f us/call, K and V %.1f MB read at %.1f GB/s"
                    " (%lld cop%s of the cache in turn)\n",
                    op.kv_type.c_str(), (long long)op.heads, (long long)op.kv_heads, (long long)op.head_dim, (long long)op.depth,
                    (long long)op.tokens, r.backend.c_str(), r.us_per_call, r.weight_bytes / 1e6, r.weight_gbps, (long long)r.copies,
                    r.copies == 1 ? "y" : "ies");
        return 0;
      }
      std::printf("%s %s k=%lld rows=%lld tokens=%lld on %s: %.1f us/call, %.2f TOPS (2*k*rows*tokens), weight %.1f MB read at %.1f GB/s"
                  " (%lld cop%s in turn)\n",
                  op.op.c_str(), op.type.c_str(), (long long)op.k, (long long)op.rows, (long long)op.tokens, r.backend.c_str(),
                  r.us_per_call, r.tops, r.weight_bytes / 1e6, r.weight_gbps, (long long)r.copies, r.copies == 1 ? "y" : "ies");
      return 0;
    }
    if (model_path.empty()) throw minfer::Error(std::string("no model: give -m MODEL.gguf\n") + kUsage);
    std::erase(ps, 0), std::erase(ns, 0);  // 0: that test skipped
    if (reps < 1 || (ps.empty() && ns.empty())) throw minfer::Error("nothing to run: -p and -n are both 0 (or -r < 1)");
    minfer::RunConfig cfg = config_path.empty() ? minfer::parse_run_config("backends: {cpu: {}}\n", "(default: cpu)")
                                                : minfer::load_run_config(config_path);
    if (!threads.empty())
      for (auto &b : cfg.backends)
        if (b.name == "cpu") {
          std::erase_if(b.options, [](const auto &kv) { return kv.first == "threads"; });
          b.options.emplace_back("threads", threads);
        }

    auto file = minfer::gguf::File::open(model_path);
    if (batched) {
      bs.kv_type = kv;
      const auto rows = minfer::bench::run_batched_bench(bs, cfg, file);
      if (as_json) {
        minfer::json::Json out = minfer::json::Json::array();
        for (const auto &r : rows)
          out.push_back({{"pp", r.pp}, {"tg", r.tg}, {"pl", r.b}, {"n_kv", r.n_kv}, {"t_pp", minfer::json::number(r.t_pp)},
                         {"speed_pp", minfer::json::number(r.s_pp)}, {"t_tg", minfer::json::number(r.t_tg)},
                         {"speed_tg", minfer::json::number(r.s_tg)}, {"t", minfer::json::number(r.t)}, {"speed", minfer::json::number(r.s)}, {"speed_gen", minfer::json::number(r.s_gen)},
                         {"steps", r.steps}, {"kv_peak_pages", r.peak_pages}, {"kv_peak_bytes", minfer::json::number(r.peak_kv_bytes)},
                         {"run_s", minfer::json::number(r.run_s)}, {"logits_s", minfer::json::number(r.logits_s)},
                         {"sample_s", minfer::json::number(r.sample_s)}});
        std::printf("%s\n", minfer::json::dump(out, 2).c_str());
      } else {
        std::printf("|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s | S_GEN t/s | KV peak  | steps | model/logits/sample s |\n");
        std::printf("|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|-----------|----------|-------|-----------------------|\n");
        for (const auto &r : rows)
          std::printf("| %5lld | %6lld | %4lld | %6lld | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f | %9.2f | %4.0f MiB | %5lld | %6.3f %6.3f %6.3f  |\n",
                      (long long)r.pp, (long long)r.tg, (long long)r.b, (long long)r.n_kv, r.t_pp, r.s_pp, r.t_tg, r.s_tg, r.t, r.s, r.s_gen,
                      r.peak_kv_bytes / (1024.0 * 1024), (long long)r.steps, r.run_s, r.logits_s, r.sample_s);
      }
      return 0;
    }
    minfer::models::BuildOptions bo;
    const int64_t max_p = ps.empty() ? 0 : *std::max_element(ps.begin(), ps.end()), max_n = ns.empty() ? 0 : *std::max_element(ns.begin(), ns.end());
    const int64_t max_d = *std::max_element(depths.begin(), depths.end());
    bo.n_ctx = std::max(max_p, max_n) + max_d + 16;
    // The depth's tokens go in steps of this many too: at least 512 (llama-bench's ubatch), else
    // `-p 0 -d 16384` filled the cache a token a step (minutes on a 7B).
    bo.max_batch = std::max<int64_t>({max_p, std::min<int64_t>(max_d, 512), 1});
    bo.kv_type = kv == "f32" ? MINFER_DTYPE_F32 : MINFER_DTYPE_F16;
    bo.tensor_parallel = cfg.tensor_ranks();
    const auto model = minfer::models::load_model(file, bo);
    minfer::BackendSet backends = minfer::open_backends(cfg);
    minfer::Session session(model->graph, cfg, backends);
    minfer::Generator gen(*model, session);

    std::mt19937 rng(1234);
    const auto random_tokens = [&](int64_t count) {
      std::vector<int32_t> t(static_cast<size_t>(count));
      for (auto &id : t) id = int32_t(rng() % uint32_t(model->hp.n_vocab));
      return t;
    };
    const std::vector<int32_t> prompt = random_tokens(max_p), context = random_tokens(max_d);
    using Clock = std::chrono::steady_clock;
    // One repetition: the depth's tokens into an empty cache, then the timed part.
    auto run = [&](Result &r) {
      gen.reset();
      if (r.depth > 0) gen.feed({context.begin(), context.begin() + r.depth});
      const auto t0 = Clock::now();
      if (r.pp) {
        gen.feed({prompt.begin(), prompt.begin() + r.tokens});
      } else {
        const int32_t tok = context.empty() ? 0 : context[0];
        for (int64_t i = 0; i < r.tokens; ++i) gen.feed({tok});
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      r.n_kv = gen.n_past();
      return double(r.tokens) / s;
    };
    std::vector<Result> results;
    const auto add_tests = [&](bool pp, const std::vector<int64_t> &counts) {
      for (int64_t c : counts)
        for (int64_t d : depths)
          results.push_back({(pp ? "pp" : "tg") + std::to_string(c) + (d > 0 ? " @ d" + std::to_string(d) : ""), pp, c, d, 0, {}});
    };
    add_tests(true, ps);
    add_tests(false, ns);
    for (auto &r : results) {
      run(r);  // warm-up, not counted
      for (int64_t i = 0; i < reps; ++i) r.tps.push_back(run(r));
    }

    int64_t params = 0;
    for (const auto &t : file->tensors()) params += t.n_elements();
    const double size_gib = double(std::filesystem::file_size(model_path)) / (1024.0 * 1024 * 1024);
    std::string backend_names, thread_str = "-";
    for (const auto &b : cfg.backends) {
      backend_names += (backend_names.empty() ? "" : "+") + b.name;
      if (b.name == "cpu") {
        thread_str = std::to_string(std::thread::hardware_concurrency());
        for (const auto &[k, v] : b.options)
          if (k == "threads") thread_str = v;
      }
    }
    const std::string name = file->get_or<std::string>("general.name", std::filesystem::path(model_path).filename().string());
    const std::string ftype = file->find("general.file_type") ? std::to_string(file->get_int("general.file_type")) : "?";
    if (as_json) {
      minfer::json::Json rows = minfer::json::Json::array();
      for (const Result &r : results)
        rows.push_back({{"model", name},
                        {"size_bytes", std::filesystem::file_size(model_path)},
                        {"params", params},
                        {"backend", backend_names},
                        {"threads", thread_str},
                        {"test", r.test},
                        {"tokens", r.tokens},
                        {"n_depth", r.depth},
                        {"n_kv", r.n_kv},
                        {"reps", reps},
                        {"tps_mean", minfer::json::number(r.mean())},
                        {"tps_sd", minfer::json::number(r.sd())}});
      std::printf("%s\n", minfer::json::dump(rows, 2).c_str());
    } else {
      std::printf("| model | size | params | backend | threads | test | t/s |\n");
      std::printf("| --- | ---: | ---: | --- | ---: | --- | ---: |\n");
      for (const Result &r : results)
        std::printf("| %s (ftype %s) | %.2f GiB | %.2f M | %s | %s | %s | %.2f ± %.2f |\n", name.c_str(), ftype.c_str(), size_gib,
                    double(params) / 1e6, backend_names.c_str(), thread_str.c_str(), r.test.c_str(), r.mean(), r.sd());
    }
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "minfer-bench: error: %s\n", e.what());
    return 1;
  }
}
