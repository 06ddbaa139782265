// One row segment at a time, in three passes over data that stays in L1: the max; the exponentials
// (kept in a buffer), their sum and weighted mean; the centred second moment. A centred moment, not
// E[s^2] - E[s]^2, so that peaked rows lose nothing to cancellation. Lane sums are fp32 over short
// blocks and are added up in fp64; the segment is then merged into the row's running state with
// Chan's parallel update in fp64.
#include "logit_stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <type_traits>
#include <vector>

namespace mia {
namespace {

constexpr int64_t kBlock = 256;
// Shifted logits below this are clamped: their weight is 0 anyway, and the square must stay finite.
constexpr float kFloor = -1e18f;


// e^x for x <= 0 (Cephes' expf: Cody-Waite reduction, degree-6 polynomial, within 2 ulp); written
// branch-free so that the loops that call it vectorise. Below -87.3 (where fp32 goes subnormal) it is 0.
inline float exp_nonpositive(float x) {
  const float clamped = std::max(x, -87.3f);
  const float n = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = (clamped - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float scale = __builtin_bit_cast(float, (static_cast<int32_t>(n) + 127) << 23);
  return x < -87.3f ? 0.0f : p * scale;
}

struct Segment {
  double max, weight, mean, m2;
};

[[gnu::always_inline]] inline Segment segment_stats_of(const float* row, int64_t cols, float* weights) {
  float max = -std::numeric_limits<float>::infinity();
  // std::max's form, spelt out: GCC vectorises this compare-and-select as a max reduction, not std::max's call.
#pragma omp simd reduction(max : max)
  for (int64_t i = 0; i < cols; ++i) max = max < row[i] ? row[i] : max;
  if (!(max > -std::numeric_limits<float>::infinity())) return {max, 0.0, 0.0, 0.0};
  double weight = 0.0, first = 0.0;
  for (int64_t start = 0; start < cols; start += kBlock) {
    const int64_t stop = std::min(start + kBlock, cols);
    float block_weight = 0.0f, block_first = 0.0f;
#pragma omp simd reduction(+ : block_weight, block_first)
    for (int64_t i = start; i < stop; ++i) {
      const float shifted = std::max(row[i] - max, kFloor);
      const float w = exp_nonpositive(shifted);
      weights[i] = w;
      block_weight += w;
      block_first += w * shifted;
    }
    weight += block_weight;
    first += block_first;
  }
  const double mean = first / weight;
  const float centre = static_cast<float>(mean);
  double m2 = 0.0;
  for (int64_t start = 0; start < cols; start += kBlock) {
    const int64_t stop = std::min(start + kBlock, cols);
    float block_m2 = 0.0f;
#pragma omp simd reduction(+ : block_m2)
    for (int64_t i = start; i < stop; ++i) {
      const float deviation = std::max(row[i] - max, kFloor) - centre;
      block_m2 += weights[i] * deviation * deviation;
    }
    m2 += block_m2;
  }
  // The centre was rounded to fp32: add back the part of the second moment that rounding moved.
  const double moved = mean - static_cast<double>(centre);
  return {max, weight, mean, m2 - weight * moved * moved};
}

// One build of the loops per instruction set, picked when the library loads.
__attribute__((target_clones("avx512f", "avx2", "default"))) Segment segment_stats(const float* row, int64_t cols, float* weights,
                                                                                    float*) {
  return segment_stats_of(row, cols, weights);
}
// A bf16 row is widened into `widened` first (bf16 is the upper half of an fp32), then read as fp32.
__attribute__((target_clones("avx512f", "avx2", "default"))) Segment segment_stats(const uint16_t* row, int64_t cols, float* weights,
                                                                                    float* widened) {
#pragma omp simd
  for (int64_t i = 0; i < cols; ++i) widened[i] = __builtin_bit_cast(float, static_cast<uint32_t>(row[i]) << 16);
  return segment_stats_of(widened, cols, weights);
}

void merge(LogitStatsState state, int64_t row, const Segment& segment) {
  if (segment.weight == 0.0) return;
  const double old_max = state.max[row];
  if (!(old_max > -std::numeric_limits<double>::infinity()) || state.weight[row] == 0.0) {
    state.max[row] = segment.max, state.weight[row] = segment.weight;
    state.mean[row] = segment.mean, state.m2[row] = segment.m2;
    return;
  }
  const double new_max = std::max(old_max, segment.max);
  const double keep = std::exp(old_max - new_max), take = std::exp(segment.max - new_max);
  const double old_weight = state.weight[row] * keep, new_weight = segment.weight * take;
  const double total = old_weight + new_weight;
  const double old_mean = state.mean[row] + (old_max - new_max), new_mean = segment.mean + (segment.max - new_max);
  const double delta = new_mean - old_mean;
  state.mean[row] = (old_mean * old_weight + new_mean * new_weight) / total;
  state.m2[row] = state.m2[row] * keep + segment.m2 * take + delta * delta * old_weight * new_weight / total;
  state.weight[row] = total;
  state.max[row] = new_max;
}

template <typename T>
void merge_rows(const T* logits, int64_t first_row, int64_t last_row, int64_t cols, int64_t row_stride, int64_t first_id,
                const int64_t* targets, LogitStatsState state) {
  std::vector<float> weights(static_cast<size_t>(cols)), widened(std::is_same_v<T, float> ? 0 : static_cast<size_t>(cols));
  for (int64_t row = first_row; row < last_row; ++row) {
    const T* values = logits + row * row_stride;
    merge(state, row, segment_stats(values, cols, weights.data(), widened.data()));
    const int64_t target = targets[row] - first_id;
    if (target >= 0 && target < cols)
      state.target_logit[row] = std::is_same_v<T, float> ? static_cast<float>(values[target]) : widened[target];
  }
}

template <typename T>
void merge_chunk(const T* logits, int64_t rows, int64_t cols, int64_t row_stride, int64_t first_id, const int64_t* targets,
                 LogitStatsState state, int threads) {
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(threads, rows));
  if (workers == 1 || cols == 0) {
    if (cols > 0) merge_rows(logits, 0, rows, cols, row_stride, first_id, targets, state);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t w = 1; w < workers; ++w)
    pool.emplace_back(merge_rows<T>, logits, rows * w / workers, rows * (w + 1) / workers, cols, row_stride, first_id,
                      targets, state);
  merge_rows(logits, 0, rows / workers, cols, row_stride, first_id, targets, state);
  for (auto& worker : pool) worker.join();
}

}  // namespace

void merge_logit_chunk(const float* logits, int64_t rows, int64_t cols, int64_t row_stride, int64_t first_id,
                       const int64_t* targets, LogitStatsState state, int threads) {
  merge_chunk(logits, rows, cols, row_stride, first_id, targets, state, threads);
}

void merge_logit_chunk(const uint16_t* logits, int64_t rows, int64_t cols, int64_t row_stride, int64_t first_id,
                       const int64_t* targets, LogitStatsState state, int threads) {
  merge_chunk(logits, rows, cols, row_stride, first_id, targets, state, threads);
}

}  // namespace mia
