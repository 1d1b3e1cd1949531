#pragma once
// What data to train and evaluate on, as a value: the config's `data:` section becomes one of
// these, and make_datasets turns it into datasets. Everything a dataset needs is here (also
// seq_len and flatten, which configs derive from the model), so models/data does not depend
// on the model zoo.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "models/data/dataset.hpp"
#include "models/data/markov_chain.hpp"
#include "models/data/procedural_images.hpp"
#include "models/data/sequence_pairs.hpp"
#include "models/data/teacher_classification.hpp"
#include "models/data/teacher_regression.hpp"
#include "models/data/token_file.hpp"
#include "models/data/video_captions.hpp"

namespace tandem::models::data {

struct TeacherData {
  TeacherSpec spec;
  int64_t samples = 16384;
};

struct TeacherRegressionData {
  TeacherRegressionSpec spec;
  int64_t samples = 16384;
};

struct SequencePairsData {
  SequencePairsSpec spec;
  int64_t samples = 16384;
};

struct VideoCaptionsData {
  VideoCaptionsSpec spec;
  int64_t samples = 16384;
};

struct ProceduralImagesData {
  ProceduralImagesSpec spec;
  int64_t samples = 16384;
};

struct MarkovTextData {
  MarkovSpec spec;
  int64_t samples = 4096;  // windows
  int64_t seq_len = 64;
};

struct TokenFileData {
  std::filesystem::path train;
  std::optional<std::filesystem::path> eval;
  TokenFormat format = TokenFormat::u8;
  int64_t vocab = 256;
  int64_t seq_len = 64;
};

struct MnistData {
  std::filesystem::path images, labels;
  std::optional<std::filesystem::path> eval_images, eval_labels;
  bool flatten = false;
  int64_t classes = 10;
};

struct Cifar10Data {
  std::vector<std::filesystem::path> files;
  std::vector<std::filesystem::path> eval_files;
  bool flatten = false;
  int64_t classes = 10;
};

using DataSpec =
    std::variant<TeacherData, ProceduralImagesData, MarkovTextData, TokenFileData, MnistData,
                 Cifar10Data, TeacherRegressionData, SequencePairsData, VideoCaptionsData>;

// The config name of a spec's kind: "teacher", "shapes", "markov-text", "tokens", "mnist",
// "cifar10", "teacher-regression", "sequence-pairs", "video-captions".
std::string data_kind_name(const DataSpec& spec);

struct Datasets {
  std::shared_ptr<const Dataset> train;
  // Held out from training: an independent stream for generated data (eval_samples samples),
  // the eval files for file formats; null when the spec names no eval files.
  std::shared_ptr<const Dataset> eval;
};

// Generated datasets share their generator between train and eval (a Markov chain is built
// once). Throws DataFileError for unreadable files and std::invalid_argument for bad values.
Datasets make_datasets(const DataSpec& spec, int64_t eval_samples);

}  // namespace tandem::models::data
