// The safetensors layout: exact bytes, round trips, and a refusal for every malformation.
#include "models/safetensors.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace tandem::models {
namespace {

namespace fs = std::filesystem;

std::vector<std::byte> file_of(const std::string& header, const std::vector<std::uint8_t>& data,
                               std::uint64_t declared_length) {
  std::vector<std::byte> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(declared_length >> (8 * i)));
  for (const char c : header) out.push_back(static_cast<std::byte>(c));
  for (const std::uint8_t b : data) out.push_back(static_cast<std::byte>(b));
  return out;
}
std::vector<std::byte> file_of(const std::string& header, const std::vector<std::uint8_t>& data) {
  return file_of(header, data, header.size());
}

std::string error_of(const std::vector<std::byte>& bytes) {
  try {
    read_safetensors_bytes(bytes, "test.safetensors");
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "";
}

// Values whose bits a conversion would change: NaN payloads, -0, subnormals, infinities.
ParamSet sample_tensors() {
  ParamSet set;
  Tensor f = Tensor::empty({2, 3}, DType::f32);
  const std::uint32_t bits[6] = {0x7fc01234u, 0x80000000u, 0x00000001u,
                                 0x7f800000u, 0xff800000u, 0x3f800000u};
  std::memcpy(f.raw_data(), bits, sizeof bits);
  set.add("layer.0.weight", f);
  Tensor b = Tensor::empty({3}, DType::bf16);
  const std::uint16_t half[3] = {0x7fc1, 0x8000, 0x3f80};
  std::memcpy(b.raw_data(), half, sizeof half);
  set.add("layer.0.bias", b);
  set.add("tokens", Tensor::from_vector(std::vector<std::int32_t>{-1, 0, 2147483647, 7}, {2, 2}));
  set.add("scalar", Tensor::full({}, 2.5f));
  set.add("empty", Tensor::empty({0, 5}, DType::f32));
  set.add("after.empty", Tensor::full({1}, -3.0f));
  return set;
}

void expect_bit_identical(const ParamSet& a, const ParamSet& b) {
  ASSERT_EQ(a.names(), b.names());
  for (std::int64_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a.name(i));
    EXPECT_EQ(a[i].shape(), b[i].shape());
    EXPECT_EQ(a[i].dtype(), b[i].dtype());
    ASSERT_EQ(a[i].nbytes(), b[i].nbytes());
    if (a[i].nbytes() > 0) {
      EXPECT_EQ(std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].nbytes()), 0);
    }
  }
}

std::uint64_t header_length(const std::vector<std::byte>& bytes) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(bytes[i]);
  return n;
}

TEST(Safetensors, RoundTripIsBitIdentical) {
  const ParamSet tensors = sample_tensors();
  const SafetensorsMetadata metadata = {{"format", "pt"}, {"step", "12"}, {"ünïcode", "✓"}};
  const std::vector<std::byte> bytes = safetensors_bytes(tensors, metadata);
  const SafetensorsContent back = read_safetensors_bytes(bytes, "memory");
  expect_bit_identical(tensors, back.tensors);
  EXPECT_EQ(back.metadata, metadata);
  // Writing what was read gives the same bytes.
  EXPECT_EQ(safetensors_bytes(back.tensors, back.metadata), bytes);
}

TEST(Safetensors, BytesFollowTheSpecification) {
  const ParamSet tensors = sample_tensors();
  const std::vector<std::byte> bytes = safetensors_bytes(tensors, {{"k", "v"}});
  const std::uint64_t n = header_length(bytes);
  EXPECT_EQ((8 + n) % 8, 0u) << "tensors start 8-byte aligned";
  const std::string header(reinterpret_cast<const char*>(bytes.data() + 8), n);
  EXPECT_EQ(header.front(), '{');
  const std::size_t close = header.find_last_of('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << "padded with spaces";
  EXPECT_NE(header.find(R"("layer.0.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find(R"("layer.0.bias":{"dtype":"BF16","shape":[3],"data_offsets":[24,30]})"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find(R"("__metadata__":{"k":"v"})"), std::string::npos) << header;
  // The data is each tensor's bytes back to back.
  std::size_t at = 8 + n;
  for (std::int64_t i = 0; i < tensors.size(); ++i) {
    const std::size_t size = tensors[i].nbytes();
    if (size > 0) {
      EXPECT_EQ(std::memcmp(bytes.data() + at, tensors[i].raw_data(), size), 0);
    }
    at += size;
  }
  EXPECT_EQ(at, bytes.size());
}

// A file as another tool writes it, byte by byte from the specification: keys in another order
// than the data, no padding, metadata last.
TEST(Safetensors, ReadsAHandBuiltFile) {
  const std::string header =
      R"({"b":{"dtype":"I32","shape":[2],"data_offsets":[8,16]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("c":{"dtype":"BF16","shape":[1,1],"data_offsets":[16,18]},"__metadata__":{"k":"v"}})";
  const std::vector<std::uint8_t> data = {
      0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0xc0,  // a: 1.5f, -2.0f
      0x07, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff,  // b: 7, -1
      0x40, 0x40,                                      // c: bf16 3.0
  };
  const SafetensorsContent content = read_safetensors_bytes(file_of(header, data), "hand-built");
  ASSERT_EQ(content.tensors.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(content.tensors.at("a").to_float_vector(), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(content.tensors.at("b").to_int_vector(), (std::vector<std::int32_t>{7, -1}));
  EXPECT_EQ(content.tensors.at("c").shape(), (Shape{1, 1}));
  EXPECT_EQ(content.tensors.at("c").to_float_vector(), (std::vector<float>{3.0f}));
  EXPECT_EQ(content.metadata, (SafetensorsMetadata{{"k", "v"}}));
}

TEST(Safetensors, FileRoundTripAndFileErrors) {
  const fs::path dir =
      fs::temp_directory_path() / ("tandem_safetensors_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path path = dir / "w.safetensors";
  const ParamSet tensors = sample_tensors();
  write_safetensors(path, tensors, {{"a", "b"}});
  const SafetensorsContent back = read_safetensors(path);
  expect_bit_identical(tensors, back.tensors);
  EXPECT_EQ(back.metadata.at("a"), "b");
  EXPECT_EQ(fs::file_size(path), safetensors_bytes(tensors, {{"a", "b"}}).size());

  fs::resize_file(path, fs::file_size(path) - 1);
  try {
    read_safetensors(path);
    ADD_FAILURE() << "a truncated file was read";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
  for (const fs::path& bad : {dir, dir / "missing.safetensors"}) {
    try {
      read_safetensors(bad);
      ADD_FAILURE() << bad << " was read";
    } catch (const SafetensorsError& e) {
      EXPECT_NE(std::string(e.what()).find(bad.string()), std::string::npos) << e.what();
    }
  }
  fs::remove_all(dir);
}

TEST(Safetensors, WriterRefusesWhatTheFormatCannotHold) {
  ParamSet sim;
  sim.add("w", Tensor::empty({2}, DType::f32, Device::sim()));
  EXPECT_THROW(safetensors_bytes(sim), SafetensorsError);
  ParamSet reserved;
  reserved.add("__metadata__", Tensor::zeros({1}));
  EXPECT_THROW(safetensors_bytes(reserved), SafetensorsError);
  ParamSet bad_utf8;
  bad_utf8.add(std::string("w\xff"), Tensor::zeros({1}));
  EXPECT_THROW(safetensors_bytes(bad_utf8), SafetensorsError);
  // More tensors than a reader accepts: refused before anything is written.
  ParamSet many;
  const Tensor none = Tensor::empty({0});
  for (std::uint64_t i = 0; i <= kSafetensorsMaxTensors; ++i) many.add(std::to_string(i), none);
  std::uint64_t written = 0;
  try {
    write_safetensors(many, {}, [&](std::span<const std::byte> b) { written += b.size(); });
    ADD_FAILURE() << "wrote a file of " << many.size() << " tensors";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("more than the " + std::to_string(kSafetensorsMaxTensors)),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(written, 0u);
}

struct BadFile {
  const char* what;
  std::vector<std::byte> bytes;
  const char* message;  // a part of the error
};

TEST(Safetensors, RefusesEveryMalformation) {
  const std::vector<std::uint8_t> eight(8, 0);
  auto entry = [](const char* name, const char* dtype, const char* shape, const char* offsets) {
    return std::string("\"") + name + R"(":{"dtype":")" + dtype + R"(","shape":)" + shape +
           R"(,"data_offsets":)" + offsets + "}";
  };
  const std::string ok = entry("a", "F32", "[2]", "[0,8]");
  const std::vector<BadFile> cases = {
      {"empty file", {}, "shorter than the 8-byte header length"},
      {"short file", std::vector<std::byte>(5), "shorter than the 8-byte header length"},
      {"header past the end", file_of("{}", {}, 1000), "runs past the end of the file"},
      {"huge header length", file_of("{}", {}, ~std::uint64_t{0}), "exceeds the limit"},
      {"invalid JSON", file_of("{\"a\":", {}), "not valid JSON"},
      {"invalid UTF-8", file_of("{\"\xc3\x28\":{}}", {}), "not valid JSON"},
      {"not an object", file_of("[1,2]", {}), "must be a JSON object"},
      {"entry not an object", file_of(R"({"a":3})", {}), "expected an object"},
      {"unknown dtype", file_of("{" + entry("a", "Q7", "[2]", "[0,8]") + "}", eight),
       "unknown dtype 'Q7'"},
      {"unsupported dtype", file_of("{" + entry("a", "F16", "[4]", "[0,8]") + "}", eight),
       "unsupported dtype 'F16'"},
      {"shape and offsets disagree", file_of("{" + entry("a", "F32", "[3]", "[0,8]") + "}", eight),
       "shape [3] of F32 needs 12"},
      {"partial element",
       file_of("{" + entry("a", "F32", "[1]", "[0,3]") + "}", std::vector<std::uint8_t>(3)),
       "hold 3 bytes"},
      {"negative dimension", file_of("{" + entry("a", "F32", "[-2]", "[0,8]") + "}", eight),
       "must be a non-negative integer"},
      {"fractional dimension", file_of("{" + entry("a", "F32", "[2.0]", "[0,8]") + "}", eight),
       "must be a non-negative integer"},
      {"shape overflows",
       file_of("{" + entry("a", "F32", "[4294967296,4294967296,0]", "[0,0]") + "}", {}),
       "overflows"},
      {"huge shape", file_of("{" + entry("a", "F32", "[1000000000000]", "[0,8]") + "}", eight),
       "needs 4000000000000"},
      {"shape beyond 2^64 bytes",
       file_of("{" + entry("a", "F32", "[2305843009213693952,2]", "[0,8]") + "}", eight),
       "needs 2^64 or more"},
      {"deep nesting", file_of("{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}", {}),
       "nests deeper than"},
      {"end before begin", file_of("{" + entry("a", "F32", "[0]", "[8,0]") + "}", eight),
       "end before begin"},
      {"offsets out of range", file_of("{" + entry("a", "F32", "[4]", "[0,16]") + "}", eight),
       "out of range"},
      {"overlap", file_of("{" + ok + "," + entry("b", "F32", "[1]", "[4,8]") + "}", eight),
       "overlaps tensor 'a'"},
      {"gap", file_of("{" + entry("a", "F32", "[1]", "[4,8]") + "}", eight), "gap of 4 bytes"},
      {"duplicate name", file_of("{" + ok + "," + ok + "}", eight), "duplicate key 'a'"},
      {"duplicate field",
       file_of(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight),
       "duplicate key 'dtype'"},
      {"trailing bytes", file_of("{" + ok + "}", std::vector<std::uint8_t>(12)),
       "4 bytes after the last tensor"},
      {"bytes but no tensors", file_of("{}", eight), "8 bytes after the last tensor"},
      {"unknown field",
       file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", eight),
       "unknown key 'x'"},
      {"missing field", file_of(R"({"a":{"dtype":"F32","shape":[2]}})", {}),
       "missing 'data_offsets'"},
      {"offsets not a pair", file_of("{" + entry("a", "F32", "[2]", "[0,8,8]") + "}", eight),
       "data_offsets must be [begin, end]"},
      {"metadata not strings", file_of(R"({"__metadata__":{"k":1}})", {}), "must be a string"},
      {"metadata not an object", file_of(R"({"__metadata__":[]})", {}), "must be an object"},
  };
  for (const BadFile& c : cases) {
    const std::string error = error_of(c.bytes);
    EXPECT_NE(error.find("test.safetensors: "), std::string::npos) << c.what << ": " << error;
    EXPECT_NE(error.find(c.message), std::string::npos) << c.what << ": " << error;
  }
}

// A header of `count` empty tensors ("t0", "t1", ...: all at offsets [0, 0]).
std::vector<std::byte> empty_tensors(std::uint64_t count) {
  std::string header = "{";
  header.reserve(count * 56 + 2);
  for (std::uint64_t i = 0; i < count; ++i) {
    if (i > 0) header += ',';
    header += "\"t" + std::to_string(i) + R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');
  return file_of(header, {});
}

double seconds_to_read(const std::vector<std::byte>& bytes, std::string* error,
                       std::int64_t* tensors) {
  const auto start = std::chrono::steady_clock::now();
  try {
    *tensors = read_safetensors_bytes(bytes, "many.safetensors").tensors.size();
  } catch (const SafetensorsError& e) {
    *error = e.what();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Headers parse in time linear in their size: one of 10^6 tensors took about 20 minutes when
// the header was an ordered JSON object looked up key by key (quadratic), and the most a file
// may list took minutes. 10^6 is over that limit: refused, naming the file, as soon as the
// parser reaches the first tensor too many. Deadlines are generous (hang detection).
TEST(Safetensors, HeadersParseInLinearTimeAndListABoundedNumberOfTensors) {
  std::string error;
  std::int64_t tensors = 0;
  const double at_limit = seconds_to_read(empty_tensors(kSafetensorsMaxTensors), &error, &tensors);
  EXPECT_EQ(error, "");
  EXPECT_EQ(tensors, static_cast<std::int64_t>(kSafetensorsMaxTensors));
  EXPECT_LT(at_limit, 5.0);
  const double million = seconds_to_read(empty_tensors(1'000'000), &error, &tensors);
  EXPECT_EQ(error, "many.safetensors: header lists more than " +
                       std::to_string(kSafetensorsMaxTensors) +
                       " tensors, the most a file may hold here");
  EXPECT_LT(million, 5.0);
}

// Tensors come back in file order (ascending offsets; empty ones at one offset in the header's
// order), as the writer gave them.
TEST(Safetensors, EmptyTensorsKeepTheHeadersOrder) {
  ParamSet tensors;
  for (const char* name : {"z", "b", "y", "a"}) tensors.add(name, Tensor::empty({0}));
  tensors.add("m", Tensor::zeros({1}));
  tensors.add("c", Tensor::empty({2, 0}));
  const SafetensorsContent back = read_safetensors_bytes(safetensors_bytes(tensors), "order");
  EXPECT_EQ(back.tensors.names(), tensors.names());
}

// Every prefix of a valid file is refused, and every corruption of one byte is either read or
// refused with a SafetensorsError (nothing else escapes, nothing crashes).
TEST(Safetensors, EveryTruncationAndByteFlipIsHandled) {
  ParamSet tensors;
  tensors.add("w", Tensor::full({2, 2}, 1.0f));
  tensors.add("b", Tensor::from_vector(std::vector<std::int32_t>{5}, {1}));
  const std::vector<std::byte> bytes = safetensors_bytes(tensors, {{"m", "1"}});
  int refused = 0;
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<std::byte> prefix(bytes.begin(), bytes.begin() + static_cast<long>(n));
    EXPECT_NE(error_of(prefix), "") << "prefix of " << n << " bytes was read";
    ++refused;
  }
  EXPECT_EQ(refused, static_cast<int>(bytes.size()));
  int read = 0, rejected = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (const std::uint8_t flip : {0x01, 0x80, 0xff}) {
      std::vector<std::byte> corrupt = bytes;
      corrupt[i] ^= static_cast<std::byte>(flip);
      try {
        read_safetensors_bytes(corrupt, "flip");
        ++read;
      } catch (const SafetensorsError&) {
        ++rejected;
      }
    }
  }
  EXPECT_EQ(read + rejected, 3 * static_cast<int>(bytes.size()));
  EXPECT_GT(rejected, 0);
  EXPECT_GT(read, 0);  // flips inside tensor data are values, not errors
}

}  // namespace
}  // namespace tandem::models
