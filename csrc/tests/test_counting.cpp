// Tests of the native core on its own (no Python), meant to run under AddressSanitizer and UBSan:
//   cmake -S . -B build/asan -DMIA_FAST_CXX_TESTS=ON -DMIA_FAST_SANITIZE=ON && cmake --build build/asan
//   ./build/asan/test_counting
// They check the counts against a plain loop and throw thousands of mutated Megatron indexes at
// the parser, which must either accept them consistently or refuse them, never read out of bounds.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "counting.hpp"
#include "json_lines.hpp"

namespace {

int failures = 0;

#define CHECK(condition)                                                        \
  do {                                                                          \
    if (!(condition)) {                                                         \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #condition); \
      ++failures;                                                               \
    }                                                                           \
  } while (0)

template <typename Fn>
bool throws_invalid_argument(Fn&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument&) {
    return true;
  }
  return false;
}

std::vector<uint64_t> naive_counts(const std::vector<uint32_t>& ids, const std::vector<int64_t>& offsets,
                                   uint64_t vocab, mia::Mode mode, int64_t cap) {
  std::vector<uint64_t> counts(vocab, 0);
  for (size_t d = 0; d + 1 < offsets.size(); ++d) {
    std::set<uint32_t> seen;
    int64_t end = offsets[d + 1];
    if (cap > 0) end = std::min(end, offsets[d] + cap);
    for (int64_t i = offsets[d]; i < end; ++i) {
      if (mode == mia::Mode::document && !seen.insert(ids[i]).second) continue;
      ++counts[ids[i]];
    }
  }
  return counts;
}

void test_counts_match_a_plain_loop() {
  std::mt19937_64 rng(7);
  const uint64_t vocab = 1009;
  std::vector<uint32_t> ids(3'000'001);
  for (auto& id : ids) id = static_cast<uint32_t>(std::min<uint64_t>(rng() % 50, rng() % vocab));
  std::vector<int64_t> offsets{0};
  while (offsets.back() < static_cast<int64_t>(ids.size()))
    offsets.push_back(std::min<int64_t>(ids.size(), offsets.back() + static_cast<int64_t>(rng() % 3000)));
  const mia::TokenBuffer buffer{ids.data(), mia::IdType::u32, static_cast<int64_t>(ids.size())};
  const int64_t n_docs = static_cast<int64_t>(offsets.size()) - 1;
  for (int threads : {1, 2, 3, 8}) {
    for (auto mode : {mia::Mode::occurrence, mia::Mode::document}) {
      for (int64_t cap : {int64_t{0}, int64_t{1}, int64_t{1024}}) {
        const mia::CountOptions options{mode, cap, threads};
        CHECK(mia::count_ids(buffer, offsets.data(), n_docs, vocab, options) ==
              naive_counts(ids, offsets, vocab, mode, cap));
      }
    }
    const std::vector<int64_t> whole{0, static_cast<int64_t>(ids.size())};
    CHECK(mia::count_ids(buffer, nullptr, 0, vocab, {mia::Mode::occurrence, 0, threads}) ==
          naive_counts(ids, whole, vocab, mia::Mode::occurrence, 0));
  }
}

void test_every_id_type() {
  const std::vector<uint16_t> u16{3, 1, 3, 0};
  const std::vector<int32_t> i32{3, 1, 3, 0};
  const std::vector<int64_t> i64{3, 1, 3, 0};
  const std::vector<uint64_t> expected{1, 1, 0, 2};
  CHECK(mia::count_ids({u16.data(), mia::IdType::u16, 4}, nullptr, 0, 4, {}) == expected);
  CHECK(mia::count_ids({i32.data(), mia::IdType::i32, 4}, nullptr, 0, 4, {}) == expected);
  CHECK(mia::count_ids({i64.data(), mia::IdType::i64, 4}, nullptr, 0, 4, {}) == expected);
}

void test_first_bad_id_is_reported_across_threads() {
  std::vector<int64_t> ids(5'000'000, 1);
  ids[4'000'000] = 99;
  ids[2'500'000] = -3;
  try {
    mia::count_ids({ids.data(), mia::IdType::i64, static_cast<int64_t>(ids.size())}, nullptr, 0, 10, {mia::Mode::occurrence, 0, 4});
    CHECK(false);
  } catch (const mia::IdOutOfRange& error) {
    CHECK(error.position == 2'500'000);
    CHECK(error.id == -3);
  }
}

void test_bad_arguments_are_refused() {
  const std::vector<uint32_t> ids{1, 2, 3};
  const mia::TokenBuffer buffer{ids.data(), mia::IdType::u32, 3};
  const std::vector<int64_t> short_offsets{0, 2};
  const std::vector<int64_t> falling{0, 2, 1, 3};
  CHECK(throws_invalid_argument([&] { mia::count_ids(buffer, nullptr, 0, 0, {}); }));
  CHECK(throws_invalid_argument([&] { mia::count_ids(buffer, nullptr, 0, 4, {mia::Mode::document, 0, 1}); }));
  CHECK(throws_invalid_argument([&] { mia::count_ids(buffer, short_offsets.data(), 1, 4, {}); }));
  CHECK(throws_invalid_argument([&] { mia::count_ids(buffer, falling.data(), 3, 4, {}); }));
}

void test_separator_offsets() {
  const std::vector<uint16_t> ids{5, 0, 5, 5, 1, 0, 2};
  const auto offsets = mia::separator_offsets({ids.data(), mia::IdType::u16, 7}, 0);
  CHECK((offsets == std::vector<int64_t>{0, 2, 6, 7}));
  CHECK((mia::separator_offsets({ids.data(), mia::IdType::u16, 0}, 0) == std::vector<int64_t>{0}));
}

template <typename T>
void put(std::vector<uint8_t>& out, T value) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

// An index as Megatron-LM writes it: documents of 1..3 sequences.
std::vector<uint8_t> megatron_index(const std::vector<int32_t>& lengths, const std::vector<int64_t>& doc_index,
                                    uint8_t code, int item_size) {
  std::vector<uint8_t> out(reinterpret_cast<const uint8_t*>("MMIDIDX\x00\x00"),
                           reinterpret_cast<const uint8_t*>("MMIDIDX\x00\x00") + 9);
  put<uint64_t>(out, 1);
  put<uint8_t>(out, code);
  put<uint64_t>(out, lengths.size());
  put<uint64_t>(out, doc_index.size());
  for (int32_t length : lengths) put(out, length);
  int64_t pointer = 0;
  for (int32_t length : lengths) {
    put(out, pointer);
    pointer += int64_t{length} * item_size;
  }
  for (int64_t d : doc_index) put(out, d);
  return out;
}

void test_megatron_index_parses() {
  const auto image = megatron_index({4, 0, 3, 5}, {0, 2, 3, 4}, 8, 2);
  const mia::MegatronIndex index = mia::parse_megatron_index(image.data(), image.size());
  CHECK(index.type == mia::IdType::u16);
  CHECK(index.total_tokens == 12);
  CHECK((index.document_offsets == std::vector<int64_t>{0, 4, 7, 12}));
  std::vector<uint8_t> with_modes = image;
  with_modes.insert(with_modes.end(), 4, 0);
  CHECK(mia::parse_megatron_index(with_modes.data(), with_modes.size()).total_tokens == 12);
  const auto int32_index = megatron_index({2}, {0, 1}, 4, 4);
  CHECK(mia::parse_megatron_index(int32_index.data(), int32_index.size()).item_size == 4);
}

void test_megatron_index_refuses_damage() {
  const auto image = megatron_index({4, 0, 3, 5}, {0, 2, 3, 4}, 8, 2);
  auto refused = [](std::vector<uint8_t> bytes) {
    return throws_invalid_argument([&] { mia::parse_megatron_index(bytes.data(), bytes.size()); });
  };
  for (size_t cut = 0; cut < image.size(); ++cut) CHECK(refused({image.begin(), image.begin() + cut}));
  auto bad_magic = image;
  bad_magic[0] = 'X';
  CHECK(refused(bad_magic));
  CHECK(refused(megatron_index({4}, {0, 1}, 7, 4)));          // float32
  CHECK(refused(megatron_index({4, 2}, {0, 2, 1}, 8, 2)));    // falling document index
  CHECK(refused(megatron_index({4, 2}, {1, 2}, 8, 2)));       // not starting at 0
  CHECK(refused(megatron_index({4, 2}, {0, 1}, 8, 2)));       // not ending at the sequence count
  CHECK(refused(megatron_index({-1}, {0, 1}, 8, 2)));         // negative length
  auto gap = image;
  gap[9 + 8 + 1 + 8 + 8 + 4 * 4 + 8] = 9;                     // second pointer moved
  CHECK(refused(gap));
  auto huge = image;
  std::memset(huge.data() + 18, 0xff, 8);                     // sequence count 2^64 - 1
  CHECK(refused(huge));
}

void test_megatron_parser_survives_mutations() {
  std::mt19937_64 rng(11);
  const auto base = megatron_index({7, 1, 0, 9, 2, 3}, {0, 1, 4, 6}, 8, 2);
  int accepted = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<uint8_t> bytes = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 4) {
        case 0: bytes[rng() % bytes.size()] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 1: bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng()); break;
        case 2: bytes.resize(rng() % (bytes.size() + 1)); break;
        default: bytes.insert(bytes.begin() + static_cast<long>(rng() % (bytes.size() + 1)), static_cast<uint8_t>(rng())); break;
      }
      if (bytes.empty()) break;
    }
    try {
      const mia::MegatronIndex index = mia::parse_megatron_index(bytes.data(), bytes.size());
      ++accepted;
      CHECK(!index.document_offsets.empty() && index.document_offsets.front() == 0);
      CHECK(index.document_offsets.back() == index.total_tokens);
      for (size_t d = 1; d < index.document_offsets.size(); ++d)
        CHECK(index.document_offsets[d] >= index.document_offsets[d - 1]);
    } catch (const std::invalid_argument&) {
    }
  }
  CHECK(accepted > 0);  // some mutations (e.g. of a length and its pointers' consequences) stay valid
}

std::vector<std::string> line_texts(const std::string& block) {
  mia::LineTexts texts;
  if (!mia::json_line_texts(block.data(), block.size(), "text", texts)) return {"<refused>"};
  std::vector<std::string> out;
  for (size_t r = 0; r + 1 < texts.offsets.size(); ++r)
    out.push_back(texts.utf8.substr(texts.offsets[r], texts.offsets[r + 1] - texts.offsets[r]));
  return out;
}

void test_json_lines_read_their_texts() {
  using Texts = std::vector<std::string>;
  CHECK(line_texts("") == Texts{});
  CHECK(line_texts(" \t\r\n\n") == Texts{});
  CHECK(line_texts("{\"x\": [1, -2.5e+3, {\"text\": 0}], \"text\": \"a\\nb\"}\r\n\n {\"text\":\"\"}") ==
        (Texts{"a\nb", ""}));
  CHECK(line_texts("{\"x\": [NaN, Infinity, -Infinity], \"text\": \"a\"}") == Texts{"a"});
  CHECK(line_texts("{\"text\": \"\\u00e9\\ud83d\\ude00\\u0000\xe4\xb8\xad\"}") == Texts{std::string("\xc3\xa9\xf0\x9f\x98\x80\0\xe4\xb8\xad", 10)});
  const char* refused[] = {
      "{\"text\": \"a\", \"te\\u0078t\": \"b\"}",  // the field twice, once escaped
      "{\"text\": \"\\ud800\"}",                   // a lone surrogate's escape
      "{\"text\": \"\xed\xa0\x80\"}",              // a surrogate in UTF-8
      "{\"text\": \"\xc0\x80\"}",                   // an overlong form
      "{\"text\": \"\xf4\x90\x80\x80\"}",          // past U+10FFFF
      "{\"text\": \"\xe4\xb8\"}",                   // cut short
      "{\"text\": \"a\tb\"}",                       // a raw control character
      "{\"text\": 1}", "{}", "[\"text\"]", "{\"text\": \"a\"} {\"text\": \"b\"}", "{\"text\": \"a\",}",
      "{\"text\": \"a\", \"x\": 01}", "{\"text\": \"a\", \"x\": nan}", "{\"text\": \"a\", \"x\": tru}",
      "\xef\xbb\xbf{\"text\": \"a\"}", "\f{\"text\": \"a\"}",
  };
  for (const char* line : refused) CHECK(line_texts(line) == Texts{"<refused>"});
  std::string deep = "{\"text\": \"a\", \"x\": " + std::string(300, '[') + std::string(300, ']') + "}";
  CHECK(line_texts(deep) == Texts{"<refused>"});
}

void test_json_lines_survive_mutations() {
  std::mt19937_64 rng(5);
  const std::string base =
      "{\"text\": \"caf\xc3\xa9 \\u4e2d\\ud83d\\ude00\\n\", \"meta\": {\"a\": [1, 2.5e-3, true, null]}}\n"
      "{\"url\": \"x\", \"text\": \"\xf0\x9f\x98\x80\"}\n";
  int accepted = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      switch (rng() % 3) {
        case 0: bytes[rng() % bytes.size()] = static_cast<char>(rng()); break;
        case 1: bytes.resize(rng() % (bytes.size() + 1)); break;
        default: bytes.insert(bytes.begin() + static_cast<long>(rng() % (bytes.size() + 1)), static_cast<char>(rng())); break;
      }
    }
    mia::LineTexts texts;
    if (!mia::json_line_texts(bytes.data(), bytes.size(), "text", texts)) continue;
    ++accepted;
    CHECK(texts.offsets.front() == 0 && static_cast<size_t>(texts.offsets.back()) == texts.utf8.size());
    for (size_t r = 0; r + 1 < texts.offsets.size(); ++r) {
      const mia::TextShape shape = mia::utf8_shape(texts.utf8.data() + texts.offsets[r], texts.offsets[r + 1] - texts.offsets[r]);
      std::vector<uint32_t> units(static_cast<size_t>(shape.code_points));
      mia::utf8_to_units(texts.utf8.data() + texts.offsets[r], texts.offsets[r + 1] - texts.offsets[r], units.data(), 4);
      for (uint32_t unit : units) CHECK(unit <= shape.widest && (unit < 0xD800 || unit > 0xDFFF));
    }
  }
  CHECK(accepted > 0);
}

}  // namespace

int main() {
  test_counts_match_a_plain_loop();
  test_every_id_type();
  test_first_bad_id_is_reported_across_threads();
  test_bad_arguments_are_refused();
  test_separator_offsets();
  test_megatron_index_parses();
  test_megatron_index_refuses_damage();
  test_megatron_parser_survives_mutations();
  test_json_lines_read_their_texts();
  test_json_lines_survive_mutations();
  if (failures) {
    std::fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("all native core tests passed\n");
  return 0;
}
