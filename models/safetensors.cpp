#include "models/safetensors.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <unordered_set>
#include <utility>

#include "runtime/atomic_file.hpp"

namespace tandem::models {
namespace {

// Tensor bytes are copied as they lie in memory; the format is little-endian.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

// One tensor's entry at a time (the header as a whole is never built as one JSON value).
using Json = nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr int kMaxHeaderDepth = 8;

std::string_view format_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
  }
  throw SafetensorsError("safetensors: invalid DType value " +
                         std::to_string(static_cast<int>(dtype)));
}

struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

struct Layout {
  std::vector<Entry> entries;  // ascending offsets
  SafetensorsMetadata metadata;
};

[[noreturn]] void refuse(std::string_view where, const std::string& what) {
  throw SafetensorsError(std::string(where) + ": " + what);
}

std::uint64_t load_u64_le(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}

std::string in_quotes(std::string_view s) {
  // Appended piecewise: GCC 12 at -O3 reports a false -Wrestrict on `"'" + std::string`.
  std::string out;
  out.reserve(s.size() + 2);
  out += '\'';
  out += s;
  out += '\'';
  return out;
}

DType parse_format_dtype(std::string_view where, const std::string& tensor, std::string_view s) {
  if (s == "F32") return DType::f32;
  if (s == "BF16") return DType::bf16;
  if (s == "I32") return DType::i32;
  static constexpr std::array<std::string_view, 14> kOthers = {
      "BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "I16", "U16",
      "F16",  "U32", "I64", "U64",     "F64",     "F4",  "F6_E2M3"};
  const bool known = std::find(kOthers.begin(), kOthers.end(), s) != kOthers.end();
  refuse(where, "tensor " + in_quotes(tensor) + ": " + (known ? "unsupported" : "unknown") +
                    " dtype " + in_quotes(s) + " (Tandem reads F32, BF16 and I32)");
}

std::uint64_t as_unsigned(std::string_view where, const std::string& what, const Json& value) {
  if (!value.is_number_unsigned()) {
    refuse(where, what + " must be a non-negative integer, not " + value.dump());
  }
  return value.get<std::uint64_t>();
}

Entry parse_entry(std::string_view where, const std::string& name, const Json& value,
                  std::uint64_t data_size) {
  const std::string who = "tensor " + in_quotes(name);
  if (!value.is_object()) refuse(where, who + ": expected an object, got " + value.type_name());
  for (const auto& [key, unused] : value.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      refuse(where, who + ": unknown key " + in_quotes(key) +
                        " (expected 'dtype', 'shape' and 'data_offsets')");
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(key)) refuse(where, who + ": missing " + in_quotes(key));
  }
  Entry e;
  e.name = name;
  const Json& dtype = value.at("dtype");
  if (!dtype.is_string()) refuse(where, who + ": dtype must be a string");
  e.dtype = parse_format_dtype(where, name, dtype.get_ref<const std::string&>());

  const Json& shape = value.at("shape");
  if (!shape.is_array()) refuse(where, who + ": shape must be an array");
  // The product of the non-zero dimensions must fit an int64, so that every partial product
  // computed later (shape_numel, strides) is defined whatever the order of the dimensions.
  std::uint64_t product = 1;
  bool has_zero = false;
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::uint64_t d =
        as_unsigned(where, who + ": shape[" + std::to_string(i) + "]", shape[i]);
    if (d == 0) {
      has_zero = true;
    } else {
      if (product > kMax / d) refuse(where, who + ": shape " + shape.dump() + " overflows");
      product *= d;
    }
    e.shape.push_back(static_cast<std::int64_t>(d));
  }
  const std::uint64_t numel = has_zero ? 0 : product;

  const Json& offsets = value.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2) {
    refuse(where, who + ": data_offsets must be [begin, end]");
  }
  e.begin = as_unsigned(where, who + ": data_offsets[0]", offsets[0]);
  e.end = as_unsigned(where, who + ": data_offsets[1]", offsets[1]);
  const std::string range =
      "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
  if (e.end < e.begin) refuse(where, who + ": " + range + " end before begin");
  if (e.end > data_size) {
    refuse(where, who + ": " + range + " out of range: the data holds " +
                      std::to_string(data_size) + " bytes");
  }
  const std::uint64_t element = dtype_size(e.dtype);
  const std::uint64_t held = e.end - e.begin;
  // held <= data_size, so comparing numel against held / element cannot overflow.
  if (held % element != 0 || numel != held / element) {
    refuse(where, who + ": " + range + " hold " + std::to_string(held) + " bytes, shape " +
                      shape.dump() + " of " + std::string(format_dtype(e.dtype)) + " needs " +
                      (numel > std::numeric_limits<std::uint64_t>::max() / element
                           ? std::string("2^64 or more")
                           : std::to_string(numel * element)));
  }
  return e;
}

SafetensorsMetadata parse_metadata(std::string_view where, const Json& value) {
  if (!value.is_object()) {
    refuse(where,
           "__metadata__ must be an object of strings, got " + std::string(value.type_name()));
  }
  SafetensorsMetadata out;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) refuse(where, "__metadata__ " + in_quotes(key) + " must be a string");
    out.emplace(key, v.get<std::string>());
  }
  return out;
}

// Reads the header as the JSON parser streams it (SAX): each top-level value (one tensor's
// entry, or __metadata__) is built and checked on its own, and the header's object never is,
// so time and memory grow linearly with the header (a DOM of ordered keys looked each one up
// in a list: quadratic, minutes for 10^6 tensors). Entries stay in file order. Every key is
// seen, so a duplicate at any depth is reported rather than silently dropped; nesting is
// bounded (a valid header nests three levels, and copying or printing a JSON value recurses
// once per level); and so is the number of tensors (kSafetensorsMaxTensors).
class HeaderReader {
 public:
  HeaderReader(std::string_view where, std::uint64_t data_size)
      : where_(where), data_size_(data_size) {}

  bool null() { return scalar(Json(nullptr)); }
  bool boolean(bool v) { return scalar(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return scalar(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return scalar(Json(v)); }
  bool number_float(Json::number_float_t v, const std::string&) { return scalar(Json(v)); }
  bool string(std::string& v) { return scalar(Json(std::move(v))); }
  bool binary(Json::binary_t& v) { return scalar(Json::binary(v)); }
  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& k);
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error_ = e.what();
    return false;
  }

  const std::string& error() const { return error_; }
  Layout take() { return std::move(layout_); }

 private:
  bool scalar(Json v);
  bool open(Json container);
  bool close();
  // Appends `v` to the container being built; returns where it now lies.
  Json* add(Json v);
  void finish();
  [[noreturn]] void not_an_object(const char* type) const {
    refuse(where_, "header must be a JSON object, got " + std::string(type));
  }

  std::string_view where_;
  std::uint64_t data_size_;
  int depth_ = 0;                            // open containers, the header's object included
  std::vector<Json*> stack_;                 // the open containers of the value being built
  std::vector<std::set<std::string>> keys_;  // keys seen in each open object below the header's
  std::unordered_set<std::string> names_;    // the header's own keys
  std::uint64_t tensors_ = 0;
  std::string name_;   // the header key whose value is being built
  std::string field_;  // the last key inside it
  Json value_;         // that value
  Layout layout_;
  std::string error_;
};

bool HeaderReader::key(std::string& k) {
  if (depth_ == 1) {
    if (!names_.insert(k).second) refuse(where_, "header: duplicate key " + in_quotes(k));
    if (k != kMetadataKey && ++tensors_ > kSafetensorsMaxTensors) {
      refuse(where_, "header lists more than " + std::to_string(kSafetensorsMaxTensors) +
                         " tensors, the most a file may hold here");
    }
    name_ = k;
    return true;
  }
  if (!keys_.back().insert(k).second) refuse(where_, "header: duplicate key " + in_quotes(k));
  field_ = k;
  return true;
}

Json* HeaderReader::add(Json v) {
  Json& parent = *stack_.back();
  if (parent.is_array()) {
    parent.push_back(std::move(v));
    return &parent.back();
  }
  Json& slot = parent[field_];
  slot = std::move(v);
  return &slot;
}

bool HeaderReader::scalar(Json v) {
  if (depth_ == 0) not_an_object(v.type_name());
  if (depth_ == 1) {
    value_ = std::move(v);
    finish();
  } else {
    add(std::move(v));
  }
  return true;
}

bool HeaderReader::open(Json container) {
  const bool object = container.is_object();
  if (depth_ == 0) {
    if (!object) not_an_object(container.type_name());
    depth_ = 1;
    return true;
  }
  if (depth_ >= kMaxHeaderDepth) {
    refuse(where_, "header nests deeper than " + std::to_string(kMaxHeaderDepth) + " levels");
  }
  if (depth_ == 1) {
    value_ = std::move(container);
    stack_.assign(1, &value_);
  } else {
    stack_.push_back(add(std::move(container)));
  }
  if (object) keys_.emplace_back();
  ++depth_;
  return true;
}

bool HeaderReader::close() {
  --depth_;
  if (depth_ == 0) return true;  // the header's object
  if (stack_.back()->is_object()) keys_.pop_back();
  stack_.pop_back();
  if (depth_ == 1) finish();
  return true;
}

void HeaderReader::finish() {
  if (name_ == kMetadataKey) {
    layout_.metadata = parse_metadata(where_, value_);
  } else {
    layout_.entries.push_back(parse_entry(where_, name_, value_, data_size_));
  }
  value_ = Json();
}

// Parses the header and checks that its tensors tile the data buffer of `data_size` bytes.
Layout parse_header(std::string_view where, std::string_view header, std::uint64_t data_size) {
  HeaderReader reader(where, data_size);
  if (!Json::sax_parse(header.begin(), header.end(), &reader)) {
    refuse(where, "header is not valid JSON: " + reader.error());
  }
  Layout layout = reader.take();
  std::stable_sort(layout.entries.begin(), layout.entries.end(),
                   [](const Entry& a, const Entry& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  std::uint64_t expected = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : layout.entries) {
    if (e.begin < expected) {
      refuse(where, "tensor " + in_quotes(e.name) + " at [" + std::to_string(e.begin) + ", " +
                        std::to_string(e.end) + "] overlaps tensor " + in_quotes(previous->name) +
                        " at [" + std::to_string(previous->begin) + ", " +
                        std::to_string(previous->end) + "]");
    }
    if (e.begin > expected) {
      refuse(where, "gap of " + std::to_string(e.begin - expected) + " bytes before tensor " +
                        in_quotes(e.name) + " at offset " + std::to_string(e.begin));
    }
    expected = e.end;
    previous = &e;
  }
  if (expected != data_size) {
    refuse(where, std::to_string(data_size - expected) + " bytes after the last tensor (data " +
                      "holds " + std::to_string(data_size) + " bytes, tensors cover " +
                      std::to_string(expected) + ")");
  }
  return layout;
}

// Splits a file of `file_size` bytes into the header's text length, checking the length field.
std::uint64_t checked_header_length(std::string_view where, const std::byte* length_field,
                                    std::uint64_t file_size) {
  const std::uint64_t n = load_u64_le(length_field);
  if (n > kSafetensorsMaxHeaderBytes) {
    refuse(where, "header length " + std::to_string(n) + " exceeds the limit of " +
                      std::to_string(kSafetensorsMaxHeaderBytes) + " bytes");
  }
  if (n > file_size - 8) {
    refuse(where, "header length " + std::to_string(n) + " runs past the end of the file (" +
                      std::to_string(file_size) + " bytes): truncated?");
  }
  return n;
}

void check_file_size(std::string_view where, std::uint64_t size) {
  if (size < 8) {
    refuse(where, "file is " + std::to_string(size) +
                      " bytes, shorter than the 8-byte header length: truncated?");
  }
}

Tensor make_tensor(const Entry& e) {
  return Tensor::empty(e.shape, e.dtype);
}

std::span<const std::byte> tensor_bytes(const Tensor& t) {
  if (t.nbytes() == 0) return {};
  return {static_cast<const std::byte*>(t.raw_data()), t.nbytes()};
}

}  // namespace

std::uint64_t write_safetensors(const ParamSet& tensors, const SafetensorsMetadata& metadata,
                                const std::function<void(std::span<const std::byte>)>& sink) {
  // The header is written entry by entry, in the tensors' order (one JSON value per entry:
  // inserting each into one ordered object would look every name up in a list).
  if (static_cast<std::uint64_t>(tensors.size()) > kSafetensorsMaxTensors) {
    throw SafetensorsError("safetensors: " + std::to_string(tensors.size()) +
                           " tensors, more than the " + std::to_string(kSafetensorsMaxTensors) +
                           " a file may hold");
  }
  std::string text = "{";
  std::uint64_t offset = 0;
  try {
    if (!metadata.empty()) text += Json(kMetadataKey).dump() + ":" + Json(metadata).dump();
    for (std::int64_t i = 0; i < tensors.size(); ++i) {
      const std::string& name = tensors.name(i);
      const Tensor& t = tensors[i];
      if (name == kMetadataKey)
        throw SafetensorsError("safetensors: tensor name '__metadata__' is reserved");
      if (!t.defined() || !t.device().has_data()) {
        throw SafetensorsError("safetensors: tensor " + in_quotes(name) + " has no data (" +
                               (t.defined() ? t.describe() : std::string("undefined")) + ")");
      }
      const std::uint64_t bytes = t.nbytes();
      nlohmann::ordered_json entry = {{"dtype", format_dtype(t.dtype())},
                                      {"shape", t.shape()},
                                      {"data_offsets", {offset, offset + bytes}}};
      if (text.size() > 1) text += ',';
      text += Json(name).dump() + ":" + entry.dump();
      offset += bytes;
    }
  } catch (const nlohmann::json::exception& e) {
    throw SafetensorsError(std::string("safetensors: a tensor name or metadata entry is not "
                                       "valid UTF-8: ") +
                           e.what());
  }
  text += '}';
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > kSafetensorsMaxHeaderBytes) {
    throw SafetensorsError("safetensors: a header of " + std::to_string(text.size()) +
                           " bytes, more than the " + std::to_string(kSafetensorsMaxHeaderBytes) +
                           " a reader accepts");
  }
  std::array<std::byte, 8> length{};
  for (std::size_t i = 0; i < 8; ++i) {
    length[i] = static_cast<std::byte>((text.size() >> (8 * i)) & 0xffu);
  }
  sink(length);
  sink(std::as_bytes(std::span<const char>(text.data(), text.size())));
  for (std::int64_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    sink(tensor_bytes(t.device().is_cpu() ? t : t.to(Device::cpu())));
  }
  return 8 + text.size() + offset;
}

std::vector<std::byte> safetensors_bytes(const ParamSet& tensors,
                                         const SafetensorsMetadata& metadata) {
  std::vector<std::byte> out;
  out.reserve(tensors.nbytes() + 256);
  write_safetensors(tensors, metadata, [&](std::span<const std::byte> bytes) {
    out.insert(out.end(), bytes.begin(), bytes.end());
  });
  return out;
}

void write_safetensors(const std::filesystem::path& path, const ParamSet& tensors,
                       const SafetensorsMetadata& metadata) {
  AtomicFile file(path);
  try {
    write_safetensors(tensors, metadata,
                      [&](std::span<const std::byte> bytes) { file.write(bytes); });
  } catch (const SafetensorsError& e) {
    throw SafetensorsError(path.string() + ": " + e.what());
  }
  file.commit();
}

SafetensorsContent read_safetensors_bytes(std::span<const std::byte> bytes,
                                          std::string_view name_for_errors) {
  const std::string_view where = name_for_errors;
  check_file_size(where, bytes.size());
  const std::uint64_t n = checked_header_length(where, bytes.data(), bytes.size());
  const std::string_view header(reinterpret_cast<const char*>(bytes.data() + 8), n);
  const std::span<const std::byte> data = bytes.subspan(8 + n);
  Layout layout = parse_header(where, header, data.size());
  SafetensorsContent out;
  out.metadata = std::move(layout.metadata);
  for (const Entry& e : layout.entries) {
    Tensor t = make_tensor(e);
    if (e.end > e.begin) std::memcpy(t.raw_data(), data.data() + e.begin, e.end - e.begin);
    out.tensors.add(e.name, std::move(t));
  }
  return out;
}

SafetensorsContent read_safetensors(const std::filesystem::path& path) {
  const std::string where = path.string();
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec) refuse(where, "cannot read: " + ec.message());
  if (!std::filesystem::is_regular_file(status)) refuse(where, "not a regular file");
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) refuse(where, "cannot read: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) refuse(where, "cannot open: " + std::string(std::strerror(errno)));
  auto read_exactly = [&](void* dst, std::uint64_t count, std::string_view what) {
    if (count == 0) return;
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(count));
    if (static_cast<std::uint64_t>(in.gcount()) != count) {
      refuse(where, "short read of " + std::string(what) + ": the file changed while read?");
    }
  };
  check_file_size(where, size);
  std::array<std::byte, 8> length{};
  read_exactly(length.data(), 8, "the header length");
  const std::uint64_t n = checked_header_length(where, length.data(), size);
  std::string header(n, '\0');
  read_exactly(header.data(), n, "the header");
  Layout layout = parse_header(where, header, size - 8 - n);
  SafetensorsContent out;
  out.metadata = std::move(layout.metadata);
  for (const Entry& e : layout.entries) {
    Tensor t = make_tensor(e);
    read_exactly(t.nbytes() ? t.raw_data() : nullptr, e.end - e.begin, "tensor '" + e.name + "'");
    out.tensors.add(e.name, std::move(t));
  }
  return out;
}

}  // namespace tandem::models
