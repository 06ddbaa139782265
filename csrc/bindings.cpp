// Python bindings of the native core (mia_fast._native): numpy buffers in, numpy arrays out.
// Counting runs with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "counting.hpp"
#include "json_lines.hpp"
#include "logit_stats.hpp"

namespace py = pybind11;

namespace {

mia::TokenBuffer token_buffer(const py::array& ids) {
  if (ids.ndim() != 1) throw py::value_error("ids must be a 1-D array");
  if (!(ids.flags() & py::array::c_style)) throw py::value_error("ids must be contiguous");
  const auto dtype = ids.dtype();
  mia::IdType type;
  if (dtype.is(py::dtype::of<uint16_t>())) type = mia::IdType::u16;
  else if (dtype.is(py::dtype::of<uint32_t>())) type = mia::IdType::u32;
  else if (dtype.is(py::dtype::of<int32_t>())) type = mia::IdType::i32;
  else if (dtype.is(py::dtype::of<int64_t>())) type = mia::IdType::i64;
  else throw py::type_error("ids must be uint16, uint32, int32 or int64, got " + std::string(py::str(dtype)));
  return {ids.data(), type, static_cast<int64_t>(ids.size())};
}

template <typename T>
py::array_t<T> to_numpy(std::vector<T>&& values) {
  auto* owned = new std::vector<T>(std::move(values));
  py::capsule release(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(static_cast<py::ssize_t>(owned->size()), owned->data(), release);
}

mia::Mode parse_mode(const std::string& mode) {
  if (mode == "occurrence") return mia::Mode::occurrence;
  if (mode == "document") return mia::Mode::document;
  throw py::value_error("mode must be 'occurrence' or 'document', got '" + mode + "'");
}

py::array_t<uint64_t> count_tokens(const py::array& ids, int64_t vocab_size, int threads,
                                   const py::object& offsets, const std::string& mode,
                                   int64_t max_tokens_per_doc) {
  const mia::TokenBuffer buffer = token_buffer(ids);
  if (vocab_size <= 0) throw py::value_error("vocab_size must be positive");
  const mia::CountOptions options{parse_mode(mode), max_tokens_per_doc, threads};
  py::array_t<int64_t, py::array::c_style | py::array::forcecast> document_offsets;
  const int64_t* offsets_data = nullptr;
  int64_t n_documents = 0;
  if (!offsets.is_none()) {
    document_offsets = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(offsets);
    if (!document_offsets || document_offsets.ndim() != 1 || document_offsets.size() < 1)
      throw py::value_error("offsets must be a 1-D integer array of documents + 1 values");
    offsets_data = document_offsets.data();
    n_documents = static_cast<int64_t>(document_offsets.size()) - 1;
  }
  std::vector<uint64_t> counts;
  {
    py::gil_scoped_release release;
    counts = mia::count_ids(buffer, offsets_data, n_documents, static_cast<uint64_t>(vocab_size), options);
  }
  return to_numpy(std::move(counts));
}

py::array_t<int64_t> separator_offsets(const py::array& ids, int64_t separator) {
  const mia::TokenBuffer buffer = token_buffer(ids);
  std::vector<int64_t> offsets;
  {
    py::gil_scoped_release release;
    offsets = mia::separator_offsets(buffer, separator);
  }
  return to_numpy(std::move(offsets));
}

py::dict parse_megatron_index(const py::buffer& image) {
  const py::buffer_info info = image.request();
  if (info.ndim != 1 || info.itemsize != 1) throw py::value_error("the index image must be a 1-D byte buffer");
  mia::MegatronIndex index =
      mia::parse_megatron_index(static_cast<const uint8_t*>(info.ptr), static_cast<size_t>(info.size));
  const char* dtype = index.type == mia::IdType::u16 ? "uint16" : index.type == mia::IdType::i32 ? "int32" : "int64";
  py::dict out;
  out["dtype"] = dtype;
  out["item_size"] = index.item_size;
  out["total_tokens"] = index.total_tokens;
  out["document_offsets"] = to_numpy(std::move(index.document_offsets));
  return out;
}

void merge_logit_chunk(const py::array& logits, int64_t first_id, const py::array_t<int64_t>& targets,
                       py::array_t<double>& state, int threads) {
  if (logits.ndim() != 2) throw py::value_error("logits must be a 2-D array");
  const int64_t rows = logits.shape(0), cols = logits.shape(1);
  const int64_t item = logits.itemsize();
  if (logits.strides(1) != item || logits.strides(0) % item != 0)
    throw py::value_error("logits rows must be contiguous");
  if (targets.ndim() != 1 || targets.shape(0) != rows || !(targets.flags() & py::array::c_style))
    throw py::value_error("targets must be a contiguous int64 array of one id per row");
  if (state.ndim() != 2 || state.shape(0) != 5 || state.shape(1) != rows || !(state.flags() & py::array::c_style) ||
      !state.writeable())
    throw py::value_error("state must be a writeable contiguous float64 array [5, rows]");
  double* s = state.mutable_data();
  const mia::LogitStatsState running{s, s + rows, s + 2 * rows, s + 3 * rows, s + 4 * rows};
  const int64_t stride = logits.strides(0) / item;
  const auto dtype = logits.dtype();
  py::gil_scoped_release release;
  if (dtype.is(py::dtype::of<float>()))
    mia::merge_logit_chunk(static_cast<const float*>(logits.data()), rows, cols, stride, first_id, targets.data(), running, threads);
  else if (dtype.is(py::dtype::of<uint16_t>()))
    mia::merge_logit_chunk(static_cast<const uint16_t*>(logits.data()), rows, cols, stride, first_id, targets.data(), running,
                           threads);
  else
    throw py::type_error("logits must be float32, or bf16 given as uint16");
}

// The str objects are made holding the GIL but read and filled without it: only their allocation waits for other
// threads.
py::object json_line_texts(const py::buffer& block, const std::string& field) {
  const py::buffer_info info = block.request();
  if (info.ndim != 1 || info.itemsize != 1) throw py::value_error("the block must be a 1-D byte buffer");
  mia::LineTexts texts;
  std::vector<mia::TextShape> shapes;
  bool read;
  {
    py::gil_scoped_release release;
    read = mia::json_line_texts(static_cast<const char*>(info.ptr), static_cast<size_t>(info.size), field, texts);
    for (size_t r = 0; read && r + 1 < texts.offsets.size(); ++r)
      shapes.push_back(mia::utf8_shape(texts.utf8.data() + texts.offsets[r], texts.offsets[r + 1] - texts.offsets[r]));
  }
  if (!read) return py::none();
  py::list out(shapes.size());
  for (size_t r = 0; r < shapes.size(); ++r) {
    PyObject* text = PyUnicode_New(shapes[r].code_points, shapes[r].widest);
    if (text == nullptr) throw py::error_already_set();
    PyList_SET_ITEM(out.ptr(), static_cast<py::ssize_t>(r), text);
  }
  {
    py::gil_scoped_release release;  // the new strs are this call's alone until it returns
    for (size_t r = 0; r < shapes.size(); ++r) {
      PyObject* text = PyList_GET_ITEM(out.ptr(), static_cast<py::ssize_t>(r));
      mia::utf8_to_units(texts.utf8.data() + texts.offsets[r], texts.offsets[r + 1] - texts.offsets[r],
                         PyUnicode_DATA(text), static_cast<int>(PyUnicode_KIND(text)));
    }
  }
  return std::move(out);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "mia-fast native core: token counting, JSON-lines text reading, Megatron index parsing and streamed logit statistics";
  // IdOutOfRange carries .position and .id, so callers that count in chunks can report file positions.
  static py::handle id_out_of_range = py::exception<mia::IdOutOfRange>(m, "IdOutOfRange", PyExc_ValueError).release();
  py::register_exception_translator([](std::exception_ptr raised) {
    try {
      if (raised) std::rethrow_exception(raised);
    } catch (const mia::IdOutOfRange& error) {
      py::object instance = id_out_of_range(error.what());
      instance.attr("position") = error.position;
      instance.attr("id") = error.id;
      PyErr_SetObject(id_out_of_range.ptr(), instance.ptr());
    }
  });
  m.def("count_tokens", &count_tokens, py::arg("ids"), py::arg("vocab_size"), py::arg("threads") = 0,
        py::arg("offsets") = py::none(), py::arg("mode") = "occurrence", py::arg("max_tokens_per_doc") = 0,
        "Per-id counts of a 1-D uint16/uint32/int32/int64 buffer, as uint64[vocab_size].\n"
        "offsets (documents + 1 rising values from 0 to len(ids)) marks documents, needed by mode='document'\n"
        "(an id counts once per document) and by max_tokens_per_doc (only each document's first ids count).\n"
        "Counts on per-thread histograms with the GIL released; an id outside [0, vocab_size) raises\n"
        "IdOutOfRange (a ValueError) naming the first such position.");
  m.def("json_line_texts", &json_line_texts, py::arg("block"), py::arg("field"),
        "The text field of every record of a block of JSON lines (bytes), as a list of str, read with the GIL\n"
        "released; None where a line is not one strict-JSON object holding the field once as a string without a\n"
        "lone surrogate (a blank line is no record).");
  m.def("separator_offsets", &separator_offsets, py::arg("ids"), py::arg("separator"),
        "Document offsets of a stream whose documents each end with the id `separator`.");
  m.def("merge_logit_chunk", &merge_logit_chunk, py::arg("logits"), py::arg("first_id"), py::arg("targets"),
        py::arg("state"), py::arg("threads") = 1,
        "Merges logits [rows, cols] (float32, or bf16 as uint16) of vocabulary ids first_id.. into the running\n"
        "per-row state [5, rows] (float64: max, weight, centred mean, second moment, target logit), in place,\n"
        "on `threads` threads with the GIL released.");
  m.def("parse_megatron_index", &parse_megatron_index, py::arg("image"),
        "Parses and validates a Megatron MMIDIDX .idx image: dtype, item_size, total_tokens and the\n"
        "token offsets of its documents. Raises ValueError saying what is wrong.");
}
