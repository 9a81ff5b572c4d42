// apps/minfer-bench/batched_bench.hpp — throughput over many sequences at once, the way
// llama-batched-bench measures it (minfer-bench --parallel 1,4,16,64 --npp 512 --ntg 128).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "gguf/gguf.hpp"

namespace minfer::bench {

struct BatchedSpec {
  std::vector<int64_t> parallel{1, 4, 16, 64};  // B: sequences per run
  int64_t npp = 512, ntg = 128;                 // prompt tokens and generated tokens per sequence
  int64_t batch = 0;                            // tokens per step at most; 0 = min(B * npp, 8192)
  std::string kv_type = "f16";
};

struct BatchedRow {
  int64_t pp, tg, b, n_kv;       // N_KV: the positions the B sequences hold at the end
  double t_pp, s_pp, t_tg, s_tg, t, s;
  double s_gen;                  // B * TG / T: generated tokens per second of the whole run (what a server doing this work delivers)
  int64_t steps, peak_pages;     // steps run; the most KV pages in use at once
  double peak_kv_bytes;          // their bytes (every layer's K and V)
  double run_s, logits_s, sample_s;  // of T: in the model's steps, reading logits, sampling
};

// Runs each B once after a warm-up run of the largest: B sequences of npp random tokens
// (distinct, so nothing is shared), each generating ntg tokens greedily. T_PP: until every
// sequence has sampled its first token; T_TG: the rest; S_PP = B * npp / T_PP, S_TG = the
// tokens generated after T_PP / T_TG, S = N_KV / T, S_GEN = B * ntg / T.
std::vector<BatchedRow> run_batched_bench(const BatchedSpec &spec, const RunConfig &cfg, std::shared_ptr<gguf::File> file);

}  // namespace minfer::bench
