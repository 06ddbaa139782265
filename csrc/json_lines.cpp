#include "json_lines.hpp"

#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace mia {
namespace {

constexpr int kMostDepth = 256;
// Python's json refuses a longer integer (int's limit on the digits it converts).
constexpr int kMostIntegerDigits = 4300;

// Bytes a string may hold as they are: printable ASCII other than the quote and the backslash.
struct PlainBytes {
  bool plain[256] = {};
  constexpr PlainBytes() {
    for (int c = 0x20; c < 0x80; ++c) plain[c] = c != '"' && c != '\\';
  }
};
constexpr PlainBytes kPlain;

// The first byte from p on that a string may not hold as it is (or end): 16 bytes a step where SSE2 is there.
const uint8_t* plain_run(const uint8_t* p, const uint8_t* end) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
  while (end - p >= 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    // Signed, a byte from 0x80 up is below the space too: the control characters and UTF-8 in one comparison.
    const __m128i special = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(bytes, quote), _mm_cmpeq_epi8(bytes, backslash)),
                                         _mm_cmplt_epi8(bytes, space));
    const int mask = _mm_movemask_epi8(special);
    if (mask != 0) return p + __builtin_ctz(static_cast<unsigned>(mask));
    p += 16;
  }
#endif
  while (p < end && kPlain.plain[*p]) ++p;
  return p;
}

// The first byte from p on that is not ASCII (or end).
const uint8_t* ascii_run(const uint8_t* p, const uint8_t* end) {
#if defined(__SSE2__)
  while (end - p >= 16) {
    const int mask = _mm_movemask_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    if (mask != 0) return p + __builtin_ctz(static_cast<unsigned>(mask));
    p += 16;
  }
#endif
  while (p < end && *p < 0x80) ++p;
  return p;
}

int hex_digit(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool in_range(uint8_t c, uint8_t low, uint8_t high) { return c >= low && c <= high; }

// The length of the well-formed UTF-8 sequence (RFC 3629: no overlong form, no surrogate, nothing past U+10FFFF)
// starting at p, else 0.
size_t utf8_sequence(const uint8_t* p, const uint8_t* end) {
  const uint8_t lead = p[0];
  const size_t left = static_cast<size_t>(end - p);
  auto tail = [](uint8_t c) { return (c & 0xC0) == 0x80; };
  if (lead >= 0xC2 && lead <= 0xDF) return left >= 2 && tail(p[1]) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    if (left < 3 || !tail(p[2])) return 0;
    const bool second = lead == 0xE0 ? in_range(p[1], 0xA0, 0xBF) : lead == 0xED ? in_range(p[1], 0x80, 0x9F) : tail(p[1]);
    return second ? 3 : 0;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    if (left < 4 || !tail(p[2]) || !tail(p[3])) return 0;
    const bool second = lead == 0xF0 ? in_range(p[1], 0x90, 0xBF) : lead == 0xF4 ? in_range(p[1], 0x80, 0x8F) : tail(p[1]);
    return second ? 4 : 0;
  }
  return 0;
}

void append_utf8(std::string& into, uint32_t code) {
  if (code < 0x80) {
    into.push_back(static_cast<char>(code));
  } else if (code < 0x800) {
    into.push_back(static_cast<char>(0xC0 | (code >> 6)));
    into.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  } else if (code < 0x10000) {
    into.push_back(static_cast<char>(0xE0 | (code >> 12)));
    into.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
    into.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  } else {
    into.push_back(static_cast<char>(0xF0 | (code >> 18)));
    into.push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
    into.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
    into.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  }
}

// One line's JSON: p moves forward as it is read; every read stops at end (the line's newline or the block's end).
class Line {
 public:
  Line(const uint8_t* begin, const uint8_t* end) : p_(begin), end_(end) {}

  // One object holding `field` once, as a string (appended to `text`), with nothing but whitespace around it.
  bool record(std::string_view field, std::string& text, std::string& key) {
    skip_space();
    if (!at('{')) return false;
    ++p_;
    bool found = false;
    skip_space();
    if (at('}')) return false;  // {} has no text
    while (true) {
      if (!at('"')) return false;
      key.clear();
      if (!string(&key)) return false;
      if (!colon()) return false;
      if (key == field) {
        if (found || !at('"') || !string(&text)) return false;  // a repeated field is the slower reader's to name
        found = true;
      } else if (!value(1)) {
        return false;
      }
      skip_space();
      if (at(',')) {
        ++p_;
        skip_space();
        continue;
      }
      if (!at('}')) return false;
      ++p_;
      skip_space();
      return found && p_ == end_;
    }
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;

  bool at(uint8_t c) const { return p_ < end_ && *p_ == c; }

  void skip_space() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\r')) ++p_;
  }

  bool colon() {
    skip_space();
    if (!at(':')) return false;
    ++p_;
    skip_space();
    return true;
  }

  bool value(int depth) {
    if (p_ >= end_ || depth > kMostDepth) return false;
    switch (*p_) {
      case '"':
        return string(nullptr);
      case '{':
        return container(depth, '}', true);
      case '[':
        return container(depth, ']', false);
      case 't':
        return word("true");
      case 'f':
        return word("false");
      case 'n':
        return word("null");
      case 'N':  // json's own words for floats that JSON cannot write: json reads them, and so does this
        return word("NaN");
      case 'I':
        return word("Infinity");
      default:
        if (end_ - p_ > 1 && p_[0] == '-' && p_[1] == 'I') return ++p_, word("Infinity");
        return number();
    }
  }

  // An object's or an array's members, checked and passed over.
  bool container(int depth, uint8_t close, bool keyed) {
    ++p_;
    skip_space();
    if (at(close)) {
      ++p_;
      return true;
    }
    while (true) {
      if (keyed && !(at('"') && string(nullptr) && colon())) return false;
      if (!value(depth + 1)) return false;
      skip_space();
      if (at(',')) {
        ++p_;
        skip_space();
        continue;
      }
      if (!at(close)) return false;
      ++p_;
      return true;
    }
  }

  bool word(const char* literal) {
    const size_t n = std::strlen(literal);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, literal, n) != 0) return false;
    p_ += n;
    return true;
  }

  bool digits() {
    const uint8_t* first = p_;
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    return p_ > first;
  }

  bool number() {
    if (at('-')) ++p_;
    const uint8_t* integer = p_;
    if (at('0')) {
      ++p_;
    } else if (p_ >= end_ || *p_ < '1' || *p_ > '9' || !digits()) {
      return false;
    }
    const bool whole = !(at('.') || at('e') || at('E'));
    if (at('.')) {
      ++p_;
      if (!digits()) return false;
    }
    if (at('e') || at('E')) {
      ++p_;
      if (at('+') || at('-')) ++p_;
      if (!digits()) return false;
    }
    return !whole || p_ - integer <= kMostIntegerDigits;
  }

  bool hex4(uint32_t& code) {
    if (end_ - p_ < 4) return false;
    code = 0;
    for (int i = 0; i < 4; ++i) {
      const int digit = hex_digit(p_[i]);
      if (digit < 0) return false;
      code = code << 4 | static_cast<uint32_t>(digit);
    }
    p_ += 4;
    return true;
  }

  // The code point of an escape after its backslash; a lone surrogate is refused.
  bool escape(uint32_t& code) {
    if (p_ >= end_) return false;
    const uint8_t c = *p_++;
    switch (c) {
      case '"': case '\\': case '/': code = c; return true;
      case 'b': code = '\b'; return true;
      case 'f': code = '\f'; return true;
      case 'n': code = '\n'; return true;
      case 'r': code = '\r'; return true;
      case 't': code = '\t'; return true;
      case 'u': break;
      default: return false;
    }
    if (!hex4(code)) return false;
    if (code >= 0xDC00 && code <= 0xDFFF) return false;
    if (code < 0xD800 || code > 0xDBFF) return true;
    uint32_t low;
    if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
    p_ += 2;
    if (!hex4(low) || low < 0xDC00 || low > 0xDFFF) return false;
    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
    return true;
  }

  // A string from its opening quote, its characters appended to `into` as UTF-8 (none where into is null).
  bool string(std::string* into) {
    ++p_;
    while (true) {
      const uint8_t* run = p_;
      p_ = plain_run(p_, end_);
      if (into) into->append(reinterpret_cast<const char*>(run), static_cast<size_t>(p_ - run));
      if (p_ >= end_) return false;
      const uint8_t c = *p_;
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c == '\\') {
        ++p_;
        uint32_t code;
        if (!escape(code)) return false;
        if (into) append_utf8(*into, code);
      } else if (c < 0x20) {
        return false;
      } else {
        const size_t n = utf8_sequence(p_, end_);
        if (n == 0) return false;
        if (into) into->append(reinterpret_cast<const char*>(p_), n);
        p_ += n;
      }
    }
  }
};

bool blank(const uint8_t* p, const uint8_t* end) {
  for (; p < end; ++p)
    if (!(*p == ' ' || *p == '\t' || *p == '\r' || *p == '\v' || *p == '\f')) return false;
  return true;
}

}  // namespace

namespace {

// The code point of the well-formed, non-ASCII UTF-8 sequence at p, p moved past it.
uint32_t next_code_point(const uint8_t*& p) {
  const size_t n = *p >= 0xF0 ? 4 : *p >= 0xE0 ? 3 : 2;
  uint32_t code = *p & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) code = code << 6 | (p[i] & 0x3F);
  p += n;
  return code;
}

}  // namespace

TextShape utf8_shape(const char* data, size_t size) {
  TextShape shape;
  const auto* p = reinterpret_cast<const uint8_t*>(data);
  const uint8_t* const end = p + size;
  while (true) {
    const uint8_t* ascii_end = ascii_run(p, end);
    shape.code_points += ascii_end - p;
    p = ascii_end;
    if (p == end) return shape;
    const uint32_t code = next_code_point(p);
    if (code > shape.widest) shape.widest = code;
    ++shape.code_points;
  }
}

namespace {

template <typename Unit>
void decode_into(const uint8_t* p, const uint8_t* end, Unit* into) {
  while (true) {
    const uint8_t* ascii_end = ascii_run(p, end);
    if (sizeof(Unit) == 1) {
      std::memcpy(into, p, static_cast<size_t>(ascii_end - p));
      into += ascii_end - p;
      p = ascii_end;
    } else {
      while (p < ascii_end) *into++ = *p++;
    }
    if (p == end) return;
    *into++ = static_cast<Unit>(next_code_point(p));
  }
}

}  // namespace

void utf8_to_units(const char* data, size_t size, void* into, int width) {
  const auto* p = reinterpret_cast<const uint8_t*>(data);
  if (width == 1) decode_into(p, p + size, static_cast<uint8_t*>(into));
  else if (width == 2) decode_into(p, p + size, static_cast<uint16_t*>(into));
  else decode_into(p, p + size, static_cast<uint32_t*>(into));
}

bool json_line_texts(const char* data, size_t size, std::string_view field, LineTexts& out) {
  out.utf8.clear();
  out.offsets.assign(1, 0);
  out.utf8.reserve(size);
  const auto* p = reinterpret_cast<const uint8_t*>(data);
  const uint8_t* const end = p + size;
  std::string key;
  while (p < end) {
    const auto* newline = static_cast<const uint8_t*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    const uint8_t* line_end = newline ? newline : end;
    if (!blank(p, line_end)) {
      if (!Line(p, line_end).record(field, out.utf8, key)) {
        out.utf8.clear();
        out.offsets.assign(1, 0);
        return false;
      }
      out.offsets.push_back(static_cast<int64_t>(out.utf8.size()));
    }
    p = newline ? newline + 1 : end;
  }
  return true;
}

}  // namespace mia
