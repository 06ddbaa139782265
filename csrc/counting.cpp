#include "counting.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <thread>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token files and Megatron indexes are little-endian; this build assumes a little-endian host"
#endif

namespace mia {

IdOutOfRange::IdOutOfRange(int64_t position_, int64_t id_, uint64_t vocab_size)
    : std::runtime_error("token id " + std::to_string(id_) + " at position " +
                         std::to_string(position_) + " is outside the vocabulary [0, " +
                         std::to_string(vocab_size) + ")"),
      position(position_),
      id(id_) {}

namespace {

constexpr int64_t kNoError = -1;
constexpr int64_t kMinIdsPerThread = int64_t{1} << 20;

// uint32 counters halve the cache footprint of the hot loop; they are flushed into the uint64
// totals before any of them can overflow. Two interleaved banks of counters let runs of one id
// (frequent under Zipf's law) update two addresses alternately instead of one dependent chain.
class Histogram {
 public:
  static constexpr int kBanks = 2;
  static constexpr int64_t kFlushEvery = std::numeric_limits<uint32_t>::max();

  explicit Histogram(uint64_t vocab_size)
      : vocab_size_(vocab_size), local_(vocab_size * kBanks, 0), total_(vocab_size, 0) {}

  // Makes room for n more increments in any one bank.
  void reserve(int64_t n) {
    if (pending_ + n > kFlushEvery) flush();
    pending_ += n;
  }

  uint32_t* bank(int b) { return local_.data() + b * vocab_size_; }

  std::vector<uint64_t> take() {
    flush();
    return std::move(total_);
  }

 private:
  void flush() {
    for (int b = 0; b < kBanks; ++b) {
      const uint32_t* counters = bank(b);
      for (uint64_t i = 0; i < vocab_size_; ++i) total_[i] += counters[i];
    }
    std::fill(local_.begin(), local_.end(), 0u);
    pending_ = 0;
  }

  uint64_t vocab_size_;
  std::vector<uint32_t> local_;
  std::vector<uint64_t> total_;
  int64_t pending_ = 0;
};

// Counts every id of ids[begin, end); returns the first out-of-range position, or kNoError.
template <typename Id>
int64_t count_occurrences(const Id* ids, int64_t begin, int64_t end, uint64_t vocab_size,
                          Histogram& hist) {
  uint32_t* even = hist.bank(0);
  uint32_t* odd = hist.bank(1);
  while (begin < end) {
    const int64_t stop = std::min(end, begin + Histogram::kFlushEvery);
    hist.reserve(stop - begin);
    int64_t i = begin;
    for (; i + 1 < stop; i += 2) {
      // Negative ids of signed types wrap to huge unsigned values and fail the same check.
      const auto a = static_cast<uint64_t>(ids[i]);
      const auto b = static_cast<uint64_t>(ids[i + 1]);
      if (a >= vocab_size) return i;
      if (b >= vocab_size) return i + 1;
      ++even[a];
      ++odd[b];
    }
    if (i < stop) {
      const auto a = static_cast<uint64_t>(ids[i]);
      if (a >= vocab_size) return i;
      ++even[a];
    }
    begin = stop;
  }
  return kNoError;
}

// Counts each distinct id of ids[begin, end) once; `stamp[id] == document + 1` marks it as seen.
template <typename Id>
int64_t count_distinct(const Id* ids, int64_t begin, int64_t end, uint64_t vocab_size,
                       uint64_t document, std::vector<uint64_t>& stamp, Histogram& hist) {
  hist.reserve(end - begin);
  uint32_t* counters = hist.bank(0);
  for (int64_t i = begin; i < end; ++i) {
    const auto id = static_cast<uint64_t>(ids[i]);
    if (id >= vocab_size) return i;
    if (stamp[id] != document + 1) {
      stamp[id] = document + 1;
      ++counters[id];
    }
  }
  return kNoError;
}

// One thread's share: documents [first, last) (or the stream run [first, last) without offsets).
struct Share {
  int64_t first;
  int64_t last;
};

template <typename Id>
int64_t count_share(const Id* ids, const int64_t* offsets, Share share, uint64_t vocab_size,
                    const CountOptions& options, Histogram& hist) {
  if (offsets == nullptr) return count_occurrences(ids, share.first, share.last, vocab_size, hist);
  if (options.mode == Mode::occurrence && options.max_tokens_per_doc == 0)
    return count_occurrences(ids, offsets[share.first], offsets[share.last], vocab_size, hist);
  std::vector<uint64_t> stamp(options.mode == Mode::document ? vocab_size : 0, 0);
  for (int64_t d = share.first; d < share.last; ++d) {
    const int64_t begin = offsets[d];
    int64_t end = offsets[d + 1];
    if (options.max_tokens_per_doc > 0) end = std::min(end, begin + options.max_tokens_per_doc);
    const int64_t bad = options.mode == Mode::document
                            ? count_distinct(ids, begin, end, vocab_size, static_cast<uint64_t>(d), stamp, hist)
                            : count_occurrences(ids, begin, end, vocab_size, hist);
    if (bad != kNoError) return bad;
  }
  return kNoError;
}

// Contiguous shares of about equal numbers of ids, one per worker.
std::vector<Share> split(int64_t n_ids, const int64_t* offsets, int64_t n_documents, int workers) {
  std::vector<Share> shares;
  int64_t first = 0;
  for (int w = 1; w <= workers; ++w) {
    const int64_t target = n_ids / workers * w + (w == workers ? n_ids % workers : 0);
    int64_t last = target;
    if (offsets != nullptr) {
      last = w == workers ? n_documents
                          : std::lower_bound(offsets, offsets + n_documents + 1, target) - offsets;
    }
    if (last > first) shares.push_back({first, last});
    first = std::max(first, last);
  }
  return shares;
}

void check_offsets(const int64_t* offsets, int64_t n_documents, int64_t n_ids) {
  if (n_documents < 0) throw std::invalid_argument("the number of documents must not be negative");
  if (offsets[0] != 0 || offsets[n_documents] != n_ids)
    throw std::invalid_argument("document offsets must run from 0 to the number of ids (" +
                                std::to_string(n_ids) + ")");
  for (int64_t d = 0; d < n_documents; ++d) {
    if (offsets[d + 1] < offsets[d])
      throw std::invalid_argument("document offsets must not decrease (document " +
                                  std::to_string(d) + ")");
  }
}

template <typename Id>
std::vector<uint64_t> count_typed(const Id* ids, int64_t n_ids, const int64_t* offsets,
                                  int64_t n_documents, uint64_t vocab_size,
                                  const CountOptions& options) {
  int workers = options.threads > 0 ? options.threads
                                    : static_cast<int>(std::thread::hardware_concurrency());
  workers = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(std::max(workers, 1), (n_ids + kMinIdsPerThread - 1) / kMinIdsPerThread)));
  const std::vector<Share> shares = split(n_ids, offsets, n_documents, workers);

  std::vector<Histogram> hists;
  hists.reserve(shares.size());
  for (size_t w = 0; w < shares.size(); ++w) hists.emplace_back(vocab_size);
  std::vector<int64_t> bad(shares.size(), kNoError);
  std::vector<std::thread> pool;
  for (size_t w = 1; w < shares.size(); ++w) {
    pool.emplace_back([&, w] {
      bad[w] = count_share(ids, offsets, shares[w], vocab_size, options, hists[w]);
    });
  }
  if (!shares.empty()) bad[0] = count_share(ids, offsets, shares[0], vocab_size, options, hists[0]);
  for (auto& t : pool) t.join();

  // Shares are in buffer order, so the first share with an error holds the first bad position.
  for (int64_t position : bad) {
    if (position != kNoError) throw IdOutOfRange(position, static_cast<int64_t>(ids[position]), vocab_size);
  }
  std::vector<uint64_t> counts(vocab_size, 0);
  for (auto& h : hists) {
    const std::vector<uint64_t> part = h.take();
    for (uint64_t i = 0; i < vocab_size; ++i) counts[i] += part[i];
  }
  return counts;
}

template <typename Fn>
auto dispatch(TokenBuffer ids, Fn&& fn) {
  switch (ids.type) {
    case IdType::u16: return fn(static_cast<const uint16_t*>(ids.data));
    case IdType::u32: return fn(static_cast<const uint32_t*>(ids.data));
    case IdType::i32: return fn(static_cast<const int32_t*>(ids.data));
    case IdType::i64: return fn(static_cast<const int64_t*>(ids.data));
  }
  throw std::invalid_argument("unknown id type");
}

// Reads little-endian fields from an untrusted image, refusing any read past its end.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  template <typename T>
  T read(const char* what) {
    if (size_ - pos_ < sizeof(T)) throw std::invalid_argument(std::string("truncated before ") + what);
    T value;
    std::memcpy(&value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  size_t remaining() const { return size_ - pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

constexpr char kMegatronMagic[] = "MMIDIDX\x00\x00";
constexpr size_t kMegatronMagicSize = 9;

}  // namespace

std::vector<uint64_t> count_ids(TokenBuffer ids, const int64_t* offsets, int64_t n_documents,
                                uint64_t vocab_size, const CountOptions& options) {
  if (vocab_size == 0) throw std::invalid_argument("vocab_size must be positive");
  if (ids.size < 0) throw std::invalid_argument("the number of ids must not be negative");
  if (options.max_tokens_per_doc < 0) throw std::invalid_argument("max_tokens_per_doc must not be negative");
  if (offsets == nullptr && (options.mode == Mode::document || options.max_tokens_per_doc > 0))
    throw std::invalid_argument("document mode and max_tokens_per_doc need document boundaries");
  if (offsets != nullptr) check_offsets(offsets, n_documents, ids.size);
  return dispatch(ids, [&](auto data) {
    return count_typed(data, ids.size, offsets, n_documents, vocab_size, options);
  });
}

std::vector<int64_t> separator_offsets(TokenBuffer ids, int64_t separator) {
  return dispatch(ids, [&](auto data) {
    std::vector<int64_t> offsets{0};
    for (int64_t i = 0; i < ids.size; ++i) {
      if (static_cast<int64_t>(data[i]) == separator) offsets.push_back(i + 1);
    }
    if (offsets.back() != ids.size) offsets.push_back(ids.size);
    return offsets;
  });
}

MegatronIndex parse_megatron_index(const uint8_t* data, size_t size) {
  if (size < kMegatronMagicSize || std::memcmp(data, kMegatronMagic, kMegatronMagicSize) != 0)
    throw std::invalid_argument("not a Megatron index: the file does not start with MMIDIDX");
  Reader in(data + kMegatronMagicSize, size - kMegatronMagicSize);
  const auto version = in.read<uint64_t>("the version");
  if (version != 1) throw std::invalid_argument("Megatron index version " + std::to_string(version) + ", expected 1");

  MegatronIndex index{};
  const auto code = in.read<uint8_t>("the dtype code");
  switch (code) {
    case 4: index.type = IdType::i32; index.item_size = 4; break;
    case 5: index.type = IdType::i64; index.item_size = 8; break;
    case 8: index.type = IdType::u16; index.item_size = 2; break;
    default:
      throw std::invalid_argument("Megatron dtype code " + std::to_string(code) +
                                  " is not a token id type (expected 8 = uint16, 4 = int32 or 5 = int64)");
  }
  const auto n_sequences = in.read<uint64_t>("the sequence count");
  const auto n_doc_indices = in.read<uint64_t>("the document count");
  // Sizes (int32), pointers (int64), document indices (int64), then optionally one int8 mode per sequence.
  const size_t rest = in.remaining();
  if (n_sequences > rest / 12 || n_doc_indices > rest / 8 ||
      (rest - n_sequences * 12) / 8 < n_doc_indices)
    throw std::invalid_argument("the index is truncated: it announces " + std::to_string(n_sequences) +
                                " sequences and " + std::to_string(n_doc_indices) +
                                " document indices but holds " + std::to_string(rest) + " bytes of them");
  const size_t needed = n_sequences * 12 + n_doc_indices * 8;
  if (rest != needed && rest != needed + n_sequences)
    throw std::invalid_argument("the index holds " + std::to_string(rest - needed) +
                                " bytes after its arrays; expected none (or one mode byte per sequence)");

  std::vector<int64_t> sequence_start(n_sequences + 1, 0);
  const int64_t max_tokens = std::numeric_limits<int64_t>::max() / index.item_size;
  for (uint64_t i = 0; i < n_sequences; ++i) {
    const auto length = in.read<int32_t>("a sequence length");
    if (length < 0) throw std::invalid_argument("sequence " + std::to_string(i) + " has a negative length");
    if (sequence_start[i] > max_tokens - length) throw std::invalid_argument("sequence lengths overflow");
    sequence_start[i + 1] = sequence_start[i] + length;
  }
  for (uint64_t i = 0; i < n_sequences; ++i) {
    const auto pointer = in.read<int64_t>("a sequence pointer");
    if (pointer != sequence_start[i] * index.item_size)
      throw std::invalid_argument("sequence " + std::to_string(i) + " starts at byte " + std::to_string(pointer) +
                                  ", expected " + std::to_string(sequence_start[i] * index.item_size) +
                                  " (sequences must follow each other in the .bin)");
  }
  if (n_doc_indices == 0) throw std::invalid_argument("the document index is empty (it must start with 0)");
  index.document_offsets.reserve(n_doc_indices);
  uint64_t previous = 0;
  for (uint64_t d = 0; d < n_doc_indices; ++d) {
    const auto sequence = in.read<int64_t>("a document index");
    if (sequence < 0 || static_cast<uint64_t>(sequence) > n_sequences ||
        static_cast<uint64_t>(sequence) < previous || (d == 0 && sequence != 0))
      throw std::invalid_argument("document index " + std::to_string(d) + " is " + std::to_string(sequence) +
                                  "; document indices must rise from 0 to the sequence count " +
                                  std::to_string(n_sequences));
    previous = static_cast<uint64_t>(sequence);
    index.document_offsets.push_back(sequence_start[previous]);
  }
  if (previous != n_sequences)
    throw std::invalid_argument("the last document index is " + std::to_string(previous) +
                                ", expected the sequence count " + std::to_string(n_sequences));
  index.total_tokens = sequence_start[n_sequences];
  return index;
}

}  // namespace mia
