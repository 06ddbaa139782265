// The text field of every record of a block of JSON lines: plain C++ over buffers, no Python.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mia {

struct LineTexts {
  std::string utf8;              // every record's text, one after another, as UTF-8
  std::vector<int64_t> offsets;  // record r's text is utf8[offsets[r], offsets[r + 1])
};

// Reads `size` bytes of JSON lines into `out` and returns true where every line is sure to read as Python's json
// reads it: a line that is empty or holds only spaces, tabs, \r, \v and \f is no record; every other line is one
// JSON object (RFC 8259 in UTF-8, JSON's whitespace around it, and NaN and Infinity, which json writes and reads)
// whose top level holds `field` once, as a string without a lone surrogate. Anything else (a line that is no such
// object, a field missing, repeated or of another type, nesting deeper than 256, an integer of more than 4300
// digits) returns false, `out` cleared, for a slower reader to judge line by line.
bool json_line_texts(const char* data, size_t size, std::string_view field, LineTexts& out);

// The code points of well-formed UTF-8 and the largest of them (0x7F for ASCII).
struct TextShape {
  int64_t code_points = 0;
  uint32_t widest = 0x7F;
};
TextShape utf8_shape(const char* data, size_t size);

// The code points of well-formed UTF-8, written into `into` as units of `width` bytes (1, 2 or 4) each.
void utf8_to_units(const char* data, size_t size, void* into, int width);

}  // namespace mia
