// Per-row statistics of logits that arrive a vocabulary chunk at a time: the CPU twin of the Triton
// token_stats kernel. Knows only buffers.
#pragma once

#include <cstdint>

namespace mia {

// The running state of n rows, each an array of n values: the max logit so far, the total weight
// W = sum e^(z - max), the weighted mean of z - max, the weighted sum of squared deviations, and the
// target's logit once its chunk has passed.
struct LogitStatsState {
  double* max;
  double* weight;
  double* mean;
  double* m2;
  double* target_logit;
};

// Merges logits [rows, cols] (row stride `row_stride` elements; fp32, or bf16 given as its 16 bits) of
// vocabulary ids first_id .. first_id + cols - 1 into `state`, on `threads` threads.
void merge_logit_chunk(const float* logits, int64_t rows, int64_t cols, int64_t row_stride, int64_t first_id,
                       const int64_t* targets, LogitStatsState state, int threads);
void merge_logit_chunk(const uint16_t* logits, int64_t rows, int64_t cols, int64_t row_stride, int64_t first_id,
                       const int64_t* targets, LogitStatsState state, int threads);

}  // namespace mia
