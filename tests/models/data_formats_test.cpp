// Real data formats, on small files the tests write byte by byte (nothing is downloaded).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/data/cifar10.hpp"
#include "models/data/data_file_error.hpp"
#include "models/data/data_spec.hpp"
#include "models/data/idx_file.hpp"
#include "models/data/mnist.hpp"
#include "models/data/token_file.hpp"
#include "models/data/token_windows.hpp"

namespace tandem::models::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

class DataFormatsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("tandem-data-" + std::string(info->name()) + "-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const Bytes& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    return p;
  }

  // Expects `f` to throw DataFileError at `offset` with a message naming the file and offset.
  template <class F>
  void expect_error(F&& f, const fs::path& file, uint64_t offset, const std::string& words) {
    try {
      f();
      ADD_FAILURE() << "expected DataFileError for " << file;
    } catch (const DataFileError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.file(), file);
      EXPECT_EQ(e.offset(), offset) << msg;
      EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
      EXPECT_NE(msg.find("byte offset " + std::to_string(offset)), std::string::npos) << msg;
      EXPECT_NE(msg.find(words), std::string::npos) << msg;
    }
  }

  fs::path dir_;
};

// IDX: zero, zero, type 0x08, ndims, big-endian dims, data.
Bytes idx(const std::vector<uint32_t>& dims, const Bytes& data, unsigned char type = 0x08) {
  Bytes b{0, 0, type, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims) {
    b.push_back(static_cast<unsigned char>(d >> 24));
    b.push_back(static_cast<unsigned char>(d >> 16));
    b.push_back(static_cast<unsigned char>(d >> 8));
    b.push_back(static_cast<unsigned char>(d));
  }
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

Bytes pixel_ramp(size_t n, unsigned char start = 0) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>((start + i * 7) % 256);
  return b;
}

// ---- raw token files ----

TEST_F(DataFormatsTest, TokenFilesReadU8AndLittleEndianU16) {
  const fs::path u8 = write("u8.bin", {3, 0, 255, 7});
  EXPECT_EQ(read_token_file(u8, TokenFormat::u8, 256), (std::vector<uint16_t>{3, 0, 255, 7}));
  const fs::path u16 = write("u16.bin", {0x02, 0x01, 0xff, 0x00, 0x00, 0x80});
  EXPECT_EQ(read_token_file(u16, TokenFormat::u16, 65536),
            (std::vector<uint16_t>{0x0102, 0x00ff, 0x8000}));
  EXPECT_EQ(parse_token_format("uint16"), TokenFormat::u16);
  EXPECT_THROW(parse_token_format("u32"), std::invalid_argument);
}

TEST_F(DataFormatsTest, TokenFileErrorsNameFileAndOffset) {
  const fs::path odd = write("odd.bin", {1, 0, 2, 0, 3});
  expect_error([&] { read_token_file(odd, TokenFormat::u16, 100); }, odd, 4,
               "inside a 2-byte token");
  const fs::path big = write("big.bin", {1, 0, 2, 0, 44, 1});
  expect_error([&] { read_token_file(big, TokenFormat::u16, 256); }, big, 4,
               "token 300 >= vocab 256");
  const fs::path empty = write("empty.bin", {});
  expect_error([&] { read_token_file(empty, TokenFormat::u8, 256); }, empty, 0, "empty");
  const fs::path missing = dir_ / "missing.bin";
  expect_error([&] { read_token_file(missing, TokenFormat::u8, 256); }, missing, 0, "cannot open");
}

TEST_F(DataFormatsTest, TokenFileDatasetCutsWindows) {
  Bytes tokens(41);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<unsigned char>(i % 13);
  const fs::path train = write("train.bin", tokens);
  Datasets ds = make_datasets(TokenFileData{.train = train,
                                            .eval = std::nullopt,
                                            .format = TokenFormat::u8,
                                            .vocab = 13,
                                            .seq_len = 8},
                              0);
  ASSERT_EQ(ds.train->size(), 5);  // (41 - 1) / 8
  EXPECT_EQ(ds.eval, nullptr);
  const std::vector<int64_t> pick{3};
  Batch b = ds.train->get(pick);
  const auto x = b.inputs.to_int_vector(), y = b.targets.to_int_vector();
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(x[static_cast<size_t>(j)], (24 + j) % 13);
    EXPECT_EQ(y[static_cast<size_t>(j)], (25 + j) % 13);
  }
  // Too short for one window.
  const fs::path tiny = write("tiny.bin", {1, 2, 3});
  EXPECT_THROW(make_datasets(TokenFileData{.train = tiny, .vocab = 13, .seq_len = 8}, 0),
               std::invalid_argument);
}

// ---- MNIST IDX ----

TEST_F(DataFormatsTest, MnistReadsImagesAndLabels) {
  const Bytes px = pixel_ramp(3 * 4 * 5);
  const fs::path images = write("images.idx", idx({3, 4, 5}, px));
  const fs::path labels = write("labels.idx", idx({3}, {7, 0, 9}));
  Mnist ds(images, labels, /*flatten=*/false);
  EXPECT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.input_shape(), (Shape{1, 4, 5}));
  const std::vector<int64_t> pick{2, 0};
  Batch b = ds.get(pick);
  EXPECT_EQ(b.inputs.shape(), (Shape{2, 1, 4, 5}));
  EXPECT_EQ(b.targets.to_int_vector(), (std::vector<int32_t>{9, 7}));
  const auto x = b.inputs.to_float_vector();
  for (size_t p = 0; p < 20; ++p) {
    EXPECT_FLOAT_EQ(x[p], static_cast<float>(px[40 + p]) / 255.0f);
    EXPECT_FLOAT_EQ(x[20 + p], static_cast<float>(px[p]) / 255.0f);
  }
  Mnist flat(images, labels, /*flatten=*/true);
  EXPECT_EQ(flat.get(pick).inputs.shape(), (Shape{2, 20}));
  const IdxArray raw = read_idx_ubyte(images);
  EXPECT_EQ(raw.dims, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(raw.data_offset, 16u);
}

TEST_F(DataFormatsTest, MnistTruncatedOrCorruptFilesNameFileAndOffset) {
  const Bytes good = idx({3, 4, 5}, pixel_ramp(60));
  const fs::path labels = write("labels.idx", idx({3}, {1, 2, 3}));

  Bytes cut = good;
  cut.resize(good.size() - 3);
  const fs::path truncated = write("truncated.idx", cut);
  expect_error([&] { Mnist(truncated, labels, false); }, truncated, cut.size(), "truncated");

  Bytes magic = good;
  magic[2] = 0x0d;  // float elements
  const fs::path bad_type = write("float.idx", magic);
  expect_error([&] { Mnist(bad_type, labels, false); }, bad_type, 2, "element type 13");

  Bytes not_idx = good;
  not_idx[1] = 0x42;
  const fs::path bad_magic = write("bad-magic.idx", not_idx);
  expect_error([&] { read_idx_ubyte(bad_magic); }, bad_magic, 1, "not an IDX file");

  const fs::path short_header = write("short.idx", {0, 0, 8, 3, 0, 0});
  expect_error([&] { read_idx_ubyte(short_header); }, short_header, 6, "IDX header");

  Bytes extra = good;
  extra.push_back(1);
  const fs::path trailing = write("trailing.idx", extra);
  expect_error([&] { read_idx_ubyte(trailing); }, trailing, good.size(), "unexpected bytes");

  const fs::path images = write("images.idx", good);
  const fs::path bad_label = write("bad-label.idx", idx({3}, {1, 10, 3}));
  expect_error([&] { Mnist(images, bad_label, false); }, bad_label, 9, "label 10 >= classes 10");
  const fs::path few = write("few.idx", idx({2}, {1, 2}));
  expect_error([&] { Mnist(images, few, false); }, few, 4, "holds 2 labels");
}

// ---- CIFAR-10 binary ----

Bytes cifar_record(unsigned char label, unsigned char start) {
  Bytes r{label};
  const Bytes px = pixel_ramp(3072, start);
  r.insert(r.end(), px.begin(), px.end());
  return r;
}

TEST_F(DataFormatsTest, Cifar10ReadsRecordsAcrossFiles) {
  Bytes a = cifar_record(3, 0);
  const Bytes a2 = cifar_record(8, 50);
  a.insert(a.end(), a2.begin(), a2.end());
  const fs::path f1 = write("data_batch_1.bin", a);
  const fs::path f2 = write("data_batch_2.bin", cifar_record(0, 99));
  Cifar10 ds({f1, f2}, /*flatten=*/false);
  EXPECT_EQ(ds.size(), 3);
  const std::vector<int64_t> pick{2, 1};
  Batch b = ds.get(pick);
  EXPECT_EQ(b.inputs.shape(), (Shape{2, 3, 32, 32}));
  EXPECT_EQ(b.targets.to_int_vector(), (std::vector<int32_t>{0, 8}));
  const auto x = b.inputs.to_float_vector();
  const Bytes px2 = pixel_ramp(3072, 99), px1 = pixel_ramp(3072, 50);
  // Channel planes in file order: red plane first, pixel (row 1, col 2) of green at 1024 + 34.
  EXPECT_FLOAT_EQ(x[1024 + 34], static_cast<float>(px2[1024 + 34]) / 255.0f);
  EXPECT_FLOAT_EQ(x[3072 + 2048 + 5], static_cast<float>(px1[2048 + 5]) / 255.0f);
  Cifar10 flat({f1}, /*flatten=*/true);
  EXPECT_EQ(flat.input_shape(), (Shape{3072}));
}

TEST_F(DataFormatsTest, Cifar10TruncatedOrCorruptFilesNameFileAndOffset) {
  Bytes two = cifar_record(1, 0);
  const Bytes second = cifar_record(2, 1);
  two.insert(two.end(), second.begin(), second.end());
  Bytes cut = two;
  cut.resize(two.size() - 100);
  const fs::path truncated = write("truncated.bin", cut);
  expect_error([&] { Cifar10({truncated}, false); }, truncated, 3073, "truncated: record 1");

  Bytes bad = two;
  bad[3073] = 10;
  const fs::path bad_label = write("bad-label.bin", bad);
  const fs::path good = write("good.bin", two);
  expect_error([&] { Cifar10({good, bad_label}, false); }, bad_label, 3073, "label 10");
  const fs::path empty = write("empty.bin", {});
  expect_error([&] { Cifar10({empty}, false); }, empty, 0, "empty");
}

TEST_F(DataFormatsTest, FileKindsUseEvalFilesWhenGiven) {
  const fs::path train = write("train.bin", cifar_record(1, 0));
  const fs::path test = write("test.bin", cifar_record(2, 5));
  Datasets ds = make_datasets(Cifar10Data{.files = {train}, .eval_files = {test}}, 100);
  ASSERT_NE(ds.eval, nullptr);
  const std::vector<int64_t> first{0};
  EXPECT_EQ(ds.eval->get(first).targets.to_int_vector(), (std::vector<int32_t>{2}));
  Datasets no_eval = make_datasets(Cifar10Data{.files = {train}}, 100);
  EXPECT_EQ(no_eval.eval, nullptr);
}

}  // namespace
}  // namespace tandem::models::data
