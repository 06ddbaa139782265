// Token counting and Megatron index parsing: plain C++ over buffers, no Python and no torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace mia {

enum class IdType { u16, u32, i32, i64 };

enum class Mode {
  occurrence,  // every position counts
  document,    // an id counts once per document
};

struct TokenBuffer {
  const void* data;
  IdType type;
  int64_t size;  // number of ids
};

struct CountOptions {
  Mode mode = Mode::occurrence;
  int64_t max_tokens_per_doc = 0;  // 0: no cap; else only each document's first ids count
  int threads = 0;                 // 0: one per hardware thread
};

// The first id outside [0, vocab_size), in buffer order.
struct IdOutOfRange : std::runtime_error {
  IdOutOfRange(int64_t position, int64_t id, uint64_t vocab_size);
  int64_t position;
  int64_t id;
};

// Per-id counts of ids, as uint64[vocab_size]. Documents are ids[offsets[d], offsets[d + 1]) for
// d < n_documents; offsets must rise from 0 to ids.size. Without offsets (nullptr) the buffer is one
// stream, which is allowed only in occurrence mode without a cap. Threads get contiguous runs of
// documents (or of the stream) and count into their own histograms.
std::vector<uint64_t> count_ids(TokenBuffer ids, const int64_t* offsets, int64_t n_documents,
                                uint64_t vocab_size, const CountOptions& options);

// Document offsets of a stream in which every document ends with `separator`; ids after the last
// separator form one more document.
std::vector<int64_t> separator_offsets(TokenBuffer ids, int64_t separator);

// A Megatron-LM MMIDIDX index (.idx), checked field by field.
struct MegatronIndex {
  IdType type;
  int item_size;
  int64_t total_tokens;                   // what the .bin must hold
  std::vector<int64_t> document_offsets;  // token offsets: documents + 1 values from 0 to total_tokens
};

// Parses and validates an .idx image; throws std::invalid_argument saying what is wrong.
MegatronIndex parse_megatron_index(const uint8_t* data, size_t size);

}  // namespace mia
