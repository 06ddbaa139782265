// Native core of mia-fast: token counting over raw id buffers.
// Knows nothing of Python objects beyond buffers; the GIL is released while counting.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace py = pybind11;

namespace {

constexpr int64_t kNoError = -1;

// Counts ids[begin, end) into hist; returns the first out-of-range position, or kNoError.
template <typename Id>
int64_t count_range(const Id* ids, int64_t begin, int64_t end, uint64_t vocab_size,
                    uint64_t* hist) {
  for (int64_t i = begin; i < end; ++i) {
    // Negative ids of signed types wrap to huge unsigned values and fail the same check.
    const uint64_t id = static_cast<uint64_t>(ids[i]);
    if (id >= vocab_size) return i;
    ++hist[id];
  }
  return kNoError;
}

template <typename Id>
py::array_t<uint64_t> count_tokens_typed(py::array_t<Id, py::array::c_style> ids,
                                         int64_t vocab_size, int threads) {
  if (vocab_size <= 0) throw std::invalid_argument("vocab_size must be positive");
  const int64_t n = ids.size();
  const Id* data = ids.data();
  const int64_t min_per_thread = 1 << 20;
  int workers = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  workers = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(workers, (n + min_per_thread - 1) / min_per_thread)));

  const auto v = static_cast<uint64_t>(vocab_size);
  std::vector<std::vector<uint64_t>> hists(workers, std::vector<uint64_t>(v, 0));
  std::vector<int64_t> bad(workers, kNoError);
  {
    py::gil_scoped_release release;
    std::vector<std::thread> pool;
    const int64_t chunk = (n + workers - 1) / workers;
    for (int w = 0; w < workers; ++w) {
      const int64_t begin = std::min(n, w * chunk);
      const int64_t end = std::min(n, begin + chunk);
      pool.emplace_back([&, w, begin, end] {
        bad[w] = count_range(data, begin, end, v, hists[w].data());
      });
    }
    for (auto& t : pool) t.join();
  }
  for (int w = 0; w < workers; ++w) {
    if (bad[w] != kNoError) {
      throw py::value_error("token id " + std::to_string(static_cast<int64_t>(data[bad[w]])) +
                            " at position " + std::to_string(bad[w]) +
                            " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
  }
  py::array_t<uint64_t> out(vocab_size);
  uint64_t* counts = out.mutable_data();
  std::fill(counts, counts + vocab_size, 0);
  for (const auto& h : hists)
    for (uint64_t i = 0; i < v; ++i) counts[i] += h[i];
  return out;
}

py::array_t<uint64_t> count_tokens(const py::array& ids, int64_t vocab_size, int threads) {
  if (ids.ndim() != 1) throw py::value_error("ids must be a 1-D array");
  const auto dtype = ids.dtype();
  if (dtype.is(py::dtype::of<uint16_t>()))
    return count_tokens_typed<uint16_t>(ids, vocab_size, threads);
  if (dtype.is(py::dtype::of<uint32_t>()))
    return count_tokens_typed<uint32_t>(ids, vocab_size, threads);
  if (dtype.is(py::dtype::of<int32_t>()))
    return count_tokens_typed<int32_t>(ids, vocab_size, threads);
  if (dtype.is(py::dtype::of<int64_t>()))
    return count_tokens_typed<int64_t>(ids, vocab_size, threads);
  throw py::type_error("ids must be uint16, uint32, int32 or int64, got " +
                       std::string(py::str(dtype)));
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "mia-fast native core: token counting";
  m.def("count_tokens", &count_tokens, py::arg("ids"), py::arg("vocab_size"),
        py::arg("threads") = 0,
        "Occurrence count of every id in a 1-D uint16/uint32/int32/int64 buffer, as uint64[vocab_size].\n"
        "Counts on per-thread histograms with the GIL released; an id outside [0, vocab_size) raises "
        "ValueError naming its position.");
}
