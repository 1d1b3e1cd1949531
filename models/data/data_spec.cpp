#include "models/data/data_spec.hpp"

#include "models/data/cifar10.hpp"
#include "models/data/markov_text.hpp"
#include "models/data/mnist.hpp"
#include "models/data/token_windows.hpp"

namespace tandem::models::data {
namespace {

constexpr uint64_t kTrainSplit = 0;
constexpr uint64_t kEvalSplit = 1;

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

std::shared_ptr<const Dataset> token_windows(const std::filesystem::path& path,
                                             const TokenFileData& d) {
  auto tokens =
      std::make_shared<const std::vector<uint16_t>>(read_token_file(path, d.format, d.vocab));
  return std::make_shared<TokenWindows>(std::move(tokens), d.seq_len, d.vocab, path.string());
}

}  // namespace

std::string data_kind_name(const DataSpec& spec) {
  return std::visit(Overloaded{[](const TeacherData&) { return "teacher"; },
                               [](const ProceduralImagesData&) { return "shapes"; },
                               [](const MarkovTextData&) { return "markov-text"; },
                               [](const TokenFileData&) { return "tokens"; },
                               [](const MnistData&) { return "mnist"; },
                               [](const Cifar10Data&) { return "cifar10"; },
                               [](const TeacherRegressionData&) { return "teacher-regression"; },
                               [](const SequencePairsData&) { return "sequence-pairs"; },
                               [](const VideoCaptionsData&) { return "video-captions"; }},
                    spec);
}

Datasets make_datasets(const DataSpec& spec, int64_t eval_samples) {
  return std::visit(
      Overloaded{
          [&](const TeacherData& d) {
            Datasets out{std::make_shared<TeacherClassification>(d.spec, d.samples, kTrainSplit),
                         nullptr};
            if (eval_samples > 0) {
              out.eval = std::make_shared<TeacherClassification>(d.spec, eval_samples, kEvalSplit);
            }
            return out;
          },
          [&](const ProceduralImagesData& d) {
            Datasets out{std::make_shared<ProceduralImages>(d.spec, d.samples, kTrainSplit),
                         nullptr};
            if (eval_samples > 0) {
              out.eval = std::make_shared<ProceduralImages>(d.spec, eval_samples, kEvalSplit);
            }
            return out;
          },
          [&](const MarkovTextData& d) {
            auto chain = std::make_shared<const MarkovChain>(d.spec);
            Datasets out{std::make_shared<MarkovText>(chain, d.samples, d.seq_len, kTrainSplit),
                         nullptr};
            if (eval_samples > 0) {
              out.eval = std::make_shared<MarkovText>(chain, eval_samples, d.seq_len, kEvalSplit);
            }
            return out;
          },
          [&](const TokenFileData& d) {
            return Datasets{token_windows(d.train, d),
                            d.eval ? token_windows(*d.eval, d) : nullptr};
          },
          [&](const MnistData& d) {
            Datasets out{std::make_shared<Mnist>(d.images, d.labels, d.flatten, d.classes),
                         nullptr};
            if (d.eval_images && d.eval_labels) {
              out.eval =
                  std::make_shared<Mnist>(*d.eval_images, *d.eval_labels, d.flatten, d.classes);
            }
            return out;
          },
          [&](const TeacherRegressionData& d) {
            Datasets out{std::make_shared<TeacherRegression>(d.spec, d.samples, kTrainSplit),
                         nullptr};
            if (eval_samples > 0) {
              out.eval = std::make_shared<TeacherRegression>(d.spec, eval_samples, kEvalSplit);
            }
            return out;
          },
          [&](const SequencePairsData& d) {
            Datasets out{std::make_shared<SequencePairs>(d.spec, d.samples, kTrainSplit), nullptr};
            if (eval_samples > 0) {
              out.eval = std::make_shared<SequencePairs>(d.spec, eval_samples, kEvalSplit);
            }
            return out;
          },
          [&](const VideoCaptionsData& d) {
            Datasets out{std::make_shared<VideoCaptions>(d.spec, d.samples, kTrainSplit), nullptr};
            if (eval_samples > 0) {
              out.eval = std::make_shared<VideoCaptions>(d.spec, eval_samples, kEvalSplit);
            }
            return out;
          },
          [&](const Cifar10Data& d) {
            Datasets out{std::make_shared<Cifar10>(d.files, d.flatten, d.classes), nullptr};
            if (!d.eval_files.empty()) {
              out.eval = std::make_shared<Cifar10>(d.eval_files, d.flatten, d.classes);
            }
            return out;
          }},
      spec);
}

}  // namespace tandem::models::data
