// `tandem predict --input FILE`'s reader against hostile files: every prefix of a good file,
// sizes and lengths that claim more than the file holds, duplicate names, strangers, wrong
// dtypes and shapes, non-finite values. Each is refused with a PredictError naming the file
// (and the tensor); a good file reads back its tensor.
#include "train/predict_inputs.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../actors/pipeline_harness.hpp"
#include "models/safetensors.hpp"
#include "temp_dir.hpp"

namespace tandem::train {
namespace {

using actors::testing::tiny_gpt;
using actors::testing::tiny_mlp;

std::vector<std::byte> file_of(const Tensor& x, const std::string& name = kPredictInputName) {
  models::ParamSet tensors;
  tensors.add(name, x);
  return models::safetensors_bytes(tensors);
}

// A file made by hand: the header's length, the header, then `data` bytes of zeros.
std::vector<std::byte> raw_file(const std::string& header, std::size_t data) {
  std::vector<std::byte> out(8 + header.size() + data, std::byte{0});
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = std::byte((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

Tensor rows(std::int64_t n, std::int64_t width) {
  std::vector<float> v(static_cast<std::size_t>(n * width));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i) - 1.0f;
  return Tensor::from_vector(v, {n, width});
}

void expect_refused(const std::vector<std::byte>& bytes, const models::Model& model,
                    const std::vector<std::string>& words) {
  try {
    read_predict_inputs_bytes(bytes, "in.safetensors", model);
    ADD_FAILURE() << "accepted " << bytes.size() << " bytes";
  } catch (const PredictError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("in.safetensors", 0), 0u) << msg;
    for (const std::string& w : words)
      EXPECT_NE(msg.find(w), std::string::npos) << w << ": " << msg;
  }
}

TEST(PredictInputs, ReadsTheInputTensor) {
  const Tensor x = rows(3, 6);
  const Tensor got = read_predict_inputs_bytes(file_of(x), "in.safetensors", tiny_mlp());
  EXPECT_EQ(got.shape(), x.shape());
  EXPECT_EQ(got.to_float_vector(), x.to_float_vector());
  // Token ids for a gpt: i32 [N, seq].
  const Tensor tokens = Tensor::zeros({2, 6}, DType::i32);
  EXPECT_EQ(read_predict_inputs_bytes(file_of(tokens), "in.safetensors", tiny_gpt()).shape(),
            (Shape{2, 6}));
}

TEST(PredictInputs, RefusesEveryTruncationOfAGoodFile) {
  const models::Model model = tiny_mlp();
  const std::vector<std::byte> good = file_of(rows(2, 6));
  for (std::size_t n = 0; n < good.size(); ++n) {
    SCOPED_TRACE(n);
    expect_refused(std::vector<std::byte>(good.begin(), good.begin() + static_cast<long>(n)), model,
                   {});
  }
  // And one byte more than the tensors cover.
  std::vector<std::byte> longer = good;
  longer.push_back(std::byte{0});
  expect_refused(longer, model, {});
}

TEST(PredictInputs, RefusesSizesTheFileDoesNotHold) {
  const models::Model model = tiny_mlp();
  // 10^12 rows of 6 floats declared, 48 bytes there: refused before anything is allocated.
  expect_refused(raw_file(R"({"input":{"dtype":"F32","shape":[1000000000000,6],)"
                          R"("data_offsets":[0,24000000000000]}})",
                          48),
                 model, {"input"});
  // Offsets that overflow, a shape whose size overflows.
  expect_refused(raw_file(R"({"input":{"dtype":"F32","shape":[2,6],)"
                          R"("data_offsets":[0,18446744073709551615]}})",
                          48),
                 model, {});
  expect_refused(raw_file(R"({"input":{"dtype":"F32","shape":[4611686018427387904,4],)"
                          R"("data_offsets":[0,48]}})",
                          48),
                 model, {});
  // A header length larger than the file, and larger than any header may be.
  std::vector<std::byte> huge = file_of(rows(2, 6));
  for (int i = 0; i < 8; ++i) huge[static_cast<std::size_t>(i)] = std::byte{0xff};
  expect_refused(huge, model, {});
}

TEST(PredictInputs, RefusesDuplicatesStrangersAndNothing) {
  const models::Model model = tiny_mlp();
  expect_refused(raw_file(R"({"input":{"dtype":"F32","shape":[1,6],"data_offsets":[0,24]},)"
                          R"("input":{"dtype":"F32","shape":[1,6],"data_offsets":[24,48]}})",
                          48),
                 model, {"duplicate", "input"});
  models::ParamSet two;
  two.add(kPredictInputName, rows(2, 6));
  two.add("extra", rows(2, 6));
  expect_refused(models::safetensors_bytes(two), model, {"'extra'"});
  expect_refused(file_of(rows(2, 6), "x"), model, {"'x'", "named 'input'"});
  expect_refused(models::safetensors_bytes(models::ParamSet{}, {{"format", "none"}}), model,
                 {"no tensor 'input'"});
}

TEST(PredictInputs, RefusesOtherDtypesAndShapes) {
  const models::Model mlp = tiny_mlp();
  expect_refused(file_of(Tensor::zeros({2, 6}, DType::i32)), mlp, {"i32", "f32[2, 6]"});
  expect_refused(file_of(Tensor::zeros({2, 6}, DType::bf16)), mlp, {"bf16"});
  expect_refused(file_of(rows(2, 7)), mlp, {"[2, 7]", "f32[2, 6]"});
  expect_refused(file_of(Tensor::from_vector(std::vector<float>(6, 1.0f), {6})), mlp, {"[6]"});
  expect_refused(file_of(Tensor::zeros({0, 6})), mlp, {"N >= 1"});
  expect_refused(file_of(Tensor::from_vector(std::vector<float>{1.0f}, {})), mlp, {"input"});
  // A gpt reads token ids, i32 [N, 6]: floats are refused, and longer sequences.
  const models::Model gpt = tiny_gpt();
  expect_refused(file_of(rows(2, 6)), gpt, {"f32", "i32[2, 6]"});
  expect_refused(file_of(Tensor::zeros({2, 7}, DType::i32)), gpt, {"[2, 7]"});
}

TEST(PredictInputs, RefusesNonFiniteValuesByRowAndColumn) {
  const models::Model model = tiny_mlp();
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity()}) {
    std::vector<float> v = rows(3, 6).to_float_vector();
    v[6 + 4] = bad;  // row 1, element 4
    expect_refused(file_of(Tensor::from_vector(v, {3, 6})), model,
                   {"'input'", "row 1 at element 4", "finite"});
  }
}

TEST(PredictInputs, NamesTheFileItCannotRead) {
  const models::Model model = tiny_mlp();
  apps::testing::TempDir dir;
  for (const std::filesystem::path& p : {dir.path() / "missing.safetensors", dir.path()}) {
    try {
      read_predict_inputs(p, model);
      ADD_FAILURE() << "read " << p;
    } catch (const PredictError& e) {
      EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    }
  }
  const std::filesystem::path good = dir.path() / "in.safetensors";
  models::ParamSet tensors;
  tensors.add(kPredictInputName, rows(2, 6));
  models::write_safetensors(good, tensors);
  EXPECT_EQ(read_predict_inputs(good, model).shape(), (Shape{2, 6}));
}

}  // namespace
}  // namespace tandem::train
