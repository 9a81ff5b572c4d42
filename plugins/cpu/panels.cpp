#include "panels.hpp"

#include "minfer/plugin.hpp"
#include "minfer/tensor.hpp"

namespace minfer::cpu {

void panel_matmul(int32_t dtype, Isa isa, int64_t k, int64_t m, const ActBlock *a, std::span<const PanelSegment> segs, ThreadPool &pool) {
  const auto dots = dtype == MINFER_DTYPE_Q4_K   ? q4_k_panel_dots
                    : dtype == MINFER_DTYPE_Q2_K ? q2_k_panel_dots
                    : dtype == MINFER_DTYPE_Q3_K ? q3_k_panel_dots
                    : dtype == MINFER_DTYPE_Q5_K ? q5_k_panel_dots
                    : dtype == MINFER_DTYPE_Q6_K ? q6_k_panel_dots
                    : dtype == MINFER_DTYPE_Q4_1 ? q4_1_panel_dots
                    : dtype == MINFER_DTYPE_Q5_0 ? q5_0_panel_dots
                    : dtype == MINFER_DTYPE_Q5_1 ? q5_1_panel_dots
                    : dtype == MINFER_DTYPE_IQ4_NL ? iq4_nl_panel_dots
                    : dtype == MINFER_DTYPE_Q8_0 ? q8_0_panel_dots
                    : dtype == MINFER_DTYPE_IQ4_XS ? iq4_xs_panel_dots
                                                 : q4_0_panel_dots;
  const int64_t per = m / kPanelRows, panel_bytes = kPanelRows * sdk::row_bytes(dtype, k), kb = k / 32;
  isa = panel_isa(isa);
  const int64_t items = int64_t(segs.size()) * per;
  pool.run_dynamic(items, pool.stream_grain(items, 4), [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const PanelSegment &s = segs[size_t(i / per)];
      const int64_t p = i % per;
      dots(isa, s.panels + p * panel_bytes, k, a + s.first * kb, s.tokens, s.y + p * kPanelRows, m);
    }
  });
}

}  // namespace minfer::cpu
