#include "batched_bench.hpp"

#include <algorithm>
#include <chrono>
#include <random>

#include "common/error.hpp"
#include "models/model.hpp"
#include "runtime/batch_session.hpp"
#include "runtime/placement.hpp"
#include "runtime/session.hpp"

namespace minfer::bench {

std::vector<BatchedRow> run_batched_bench(const BatchedSpec &spec, const RunConfig &cfg, std::shared_ptr<gguf::File> file) {
  if (spec.parallel.empty() || spec.npp < 1 || spec.ntg < 1) throw Error("--parallel needs sequence counts, --npp and --ntg at least 1");
  const int64_t most = *std::max_element(spec.parallel.begin(), spec.parallel.end());
  // One model and session for every B: built for the largest, its pool just big enough.
  models::BuildOptions bo;
  bo.n_ctx = spec.npp + spec.ntg;
  bo.max_batch = spec.batch > 0 ? spec.batch : std::min<int64_t>(most * spec.npp, 8192);
  bo.kv_type = spec.kv_type == "f32" ? MINFER_DTYPE_F32 : MINFER_DTYPE_F16;
  bo.max_seqs = most;
  bo.tensor_parallel = cfg.tensor_ranks();
  bo.kv_pages = most * ((bo.n_ctx + bo.page_size - 1) / bo.page_size);
  const auto model = models::load_model(file, bo);
  BackendSet backends = open_backends(cfg);
  Session session(model->graph, cfg, backends);
  const double page_bytes = double(model->kv_page_bytes());

  std::mt19937 rng(1234);
  sampling::Config greedy;
  greedy.temperature = 0;
  using Clock = std::chrono::steady_clock;
  auto run = [&](int64_t B) {
    // A sequence never ends early: only the token count stops it, as in llama-batched-bench.
    BatchSession batch(*model, session, [](int32_t) { return false; });
    for (int64_t i = 0; i < B; ++i) {
      std::vector<int32_t> prompt(static_cast<size_t>(spec.npp));
      for (auto &t : prompt) t = int32_t(rng() % uint32_t(model->hp.n_vocab));
      batch.submit({i, std::move(prompt), spec.ntg, greedy});
    }
    BatchedRow r{spec.npp, spec.ntg, B, B * (spec.npp + spec.ntg), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    std::vector<bool> started(size_t(B), false);
    int64_t n_started = 0, after_pp = 0;
    const auto t0 = Clock::now();
    auto t_pp = t0;
    while (!batch.idle()) {
      const bool decoding = t_pp != t0;  // every prompt was read: this step's tokens are TG's
      for (const SeqToken &t : batch.step()) {
        if (!started[size_t(t.id)]) started[size_t(t.id)] = true, ++n_started;
        else if (decoding) ++after_pp;
      }
      r.peak_pages = std::max<int64_t>(r.peak_pages, batch.pool().stats().used);
      if (n_started == B && t_pp == t0) t_pp = Clock::now();
      batch.take_finished();
    }
    const auto t1 = Clock::now();
    r.steps = batch.stats().steps;
    r.run_s = batch.stats().run_s, r.logits_s = batch.stats().logits_s, r.sample_s = batch.stats().sample_s;
    r.t_pp = std::chrono::duration<double>(t_pp - t0).count();
    r.t_tg = std::chrono::duration<double>(t1 - t_pp).count();
    r.t = r.t_pp + r.t_tg;
    r.s_pp = double(B * spec.npp) / r.t_pp;
    r.s_tg = r.t_tg > 0 ? double(after_pp) / r.t_tg : 0;
    r.s = double(r.n_kv) / r.t;
    r.s_gen = double(B * spec.ntg) / r.t;
    r.peak_kv_bytes = double(r.peak_pages) * page_bytes;
    return r;
  };
  run(most);  // warm-up: caches, scratch sizes and the decode steps' CUDA Graphs
  std::vector<BatchedRow> rows;
  for (int64_t B : spec.parallel) rows.push_back(run(B));
  return rows;
}

}  // namespace minfer::bench
