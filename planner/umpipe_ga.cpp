#include "planner/umpipe_ga.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <span>
#include <stdexcept>

#include "planner/umpipe_baselines.hpp"
#include "planner/umpipe_batch_evaluator.hpp"
#include "planner/umpipe_evaluator.hpp"
#include "runtime/counter_rng.hpp"

namespace tandem::planner {
namespace {

using Word = std::uint64_t;
using Genes = std::span<Word>;

// Population of packed chromosomes (see cuts_of): every individual is 2 P rows of `words`
// words; the bits that can change are 0 .. B-2 of each row (B-1 is always a cut).
class Ga {
 public:
  Ga(const UmpipeProblem& problem, const UmpipeGaOptions& options)
      : problem_(problem),
        options_(options),
        rng_(RngStream::from_seed(options.seed)),
        single_(problem),
        batch_(problem) {
    stages_ = problem.stage_count();
    gaps_ = static_cast<std::size_t>(problem.minibatch) - 1;
    words_ = umpipe_row_words(problem.minibatch);
    chromosome_ = static_cast<std::size_t>(stages_) * words_;
    stride_ = 2 * chromosome_;
    const std::size_t free_bits = static_cast<std::size_t>(stages_) * gaps_;
    flip_rate_ =
        options.flip_rate >= 0 ? options.flip_rate : (free_bits > 0 ? 1.0 / free_bits : 0.0);
  }

  UmpipeGaResult run() {
    const int size = options_.population;
    std::vector<Word> population(size * stride_), next(size * stride_);
    std::vector<double> makespan(size);
    start_ = std::chrono::steady_clock::now();
    seed(population);
    UmpipeGaResult result;
    best_ = std::numeric_limits<double>::infinity();
    evaluate(population, makespan, result);
    record(population, makespan, result);
    report(0, result);
    std::vector<int> order(size);
    for (int generation = 1; generation <= options_.generations; ++generation) {
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return makespan[a] < makespan[b]; });
      for (int e = 0; e < options_.elites; ++e) {
        std::copy_n(population.begin() + order[e] * stride_, stride_, next.begin() + e * stride_);
      }
      for (int child = options_.elites; child < size; ++child) {
        const int a = select(makespan);
        const int b = select(makespan);
        breed(individual(population, a), individual(population, b), individual(next, child));
      }
      std::swap(population, next);
      evaluate(population, makespan, result);
      record(population, makespan, result);
      report(generation, result);
    }
    result.slices = slices_of(best_genes_, stages_, problem_.minibatch);
    result.makespan = best_;
    return result;
  }

 private:
  Genes individual(std::vector<Word>& population, int index) const {
    return Genes(population.data() + index * stride_, stride_);
  }

  bool bit(const Word* row, std::size_t i) const { return ((row[i / 64] >> (i % 64)) & 1) != 0; }
  void flip(Word* row, std::size_t i) const { row[i / 64] ^= Word{1} << (i % 64); }

  void seed(std::vector<Word>& population) {
    std::vector<std::vector<Word>> seeds;
    const int samples = problem_.minibatch;
    const int equal = std::max(1, std::min(samples, options_.population / 2));
    for (int e = 0; e < equal; ++e) {
      const int m =
          equal == 1
              ? 1
              : 1 + static_cast<int>(static_cast<long long>(e) * (samples - 1) / (equal - 1));
      seeds.push_back(cuts_of(equal_slices(stages_, samples, m), samples));
    }
    if (options_.seed_baselines) {
      seeds.push_back(cuts_of(local_greedy_slices(problem_).slices, samples));
      seeds.push_back(cuts_of(global_greedy_slices(problem_).slices, samples));
    }
    for (int k = 0; k < options_.population; ++k) {
      Genes genes = individual(population, k);
      if (k < static_cast<int>(seeds.size())) {
        std::copy(seeds[k].begin(), seeds[k].end(), genes.begin());
      } else {
        // Mutated copies of the seeds keep their structure while adding diversity.
        const auto& from = seeds[rng_.below_fast(static_cast<std::uint32_t>(seeds.size()))];
        std::copy(from.begin(), from.end(), genes.begin());
        for (int round = 0; round < 3; ++round) mutate(genes);
      }
      tie(genes);
    }
  }

  void evaluate(std::vector<Word>& population, std::vector<double>& makespan,
                UmpipeGaResult& result) {
    if (options_.batched) {
      batch_.evaluate(population, makespan);
    } else {
      for (int k = 0; k < options_.population; ++k) {
        makespan[k] = single_.makespan(individual(population, k));
      }
    }
    result.evaluations += options_.population;
  }

  void record(std::vector<Word>& population, const std::vector<double>& makespan,
              UmpipeGaResult& result) {
    for (int k = 0; k < options_.population; ++k) {
      if (makespan[k] < best_) {
        best_ = makespan[k];
        const Genes genes = individual(population, k);
        best_genes_.assign(genes.begin(), genes.end());
      }
    }
    result.best_by_generation.push_back(best_);
  }

  void report(int generation, const UmpipeGaResult& result) const {
    if (!options_.progress) return;  // no clock read when nobody listens
    options_.progress(
        {generation, options_.generations, best_, result.evaluations,
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count()});
  }

  int select(const std::vector<double>& makespan) {
    const auto size = static_cast<std::uint32_t>(options_.population);
    int winner = static_cast<int>(rng_.below_fast(size));
    for (int t = 1; t < options_.tournament; ++t) {
      const int rival = static_cast<int>(rng_.below_fast(size));
      if (makespan[rival] < makespan[winner] ||
          (makespan[rival] == makespan[winner] && rival < winner)) {
        winner = rival;
      }
    }
    return winner;
  }

  void breed(Genes a, Genes b, Genes child) {
    const int chromosomes = options_.dual ? 2 : 1;
    for (int c = 0; c < chromosomes; ++c) {
      const std::size_t offset = c * chromosome_;
      const Word* x = a.data() + offset;
      const Word* y = b.data() + offset;
      Word* out = child.data() + offset;
      if (gaps_ == 0 || rng_.uniform() >= options_.crossover_rate) {
        std::copy_n(x, chromosome_, out);
      } else if (rng_.below_fast(2) == 0) {
        // One point on the flattened matrix: stages before it from x, after it from y, and
        // the row it falls in split at a sample.
        const auto point = rng_.below_fast(static_cast<std::uint32_t>(stages_ * gaps_ + 1));
        const std::size_t row = point / gaps_;
        const std::size_t at = point % gaps_;
        std::copy_n(x, row * words_, out);
        std::copy(y + row * words_, y + chromosome_, out + row * words_);
        if (row < static_cast<std::size_t>(stages_)) {
          for (std::size_t w = 0; w < words_; ++w) {
            const std::size_t low = w * 64;
            const Word keep = at <= low        ? 0
                              : at >= low + 64 ? ~Word{0}
                                               : (Word{1} << (at - low)) - 1;
            out[row * words_ + w] = (x[row * words_ + w] & keep) | (y[row * words_ + w] & ~keep);
          }
        }
      } else {
        // Row-uniform: each stage's partition from either parent.
        for (int s = 0; s < stages_; ++s) {
          const Word* from = rng_.below_fast(2) == 0 ? x : y;
          std::copy_n(from + s * words_, words_, out + s * words_);
        }
      }
    }
    mutate(child);
    tie(child);
  }

  void mutate(Genes genes) {
    if (gaps_ == 0) return;
    const int chromosomes = options_.dual ? 2 : 1;
    const std::size_t free_bits = static_cast<std::size_t>(stages_) * gaps_;
    for (int c = 0; c < chromosomes; ++c) {
      Word* rows = genes.data() + c * chromosome_;
      // Bit flips with geometric skips: one draw per flip, not per bit.
      if (flip_rate_ > 0) {
        const double log_keep = std::log1p(-std::min(flip_rate_, 0.999999));
        std::size_t position = 0;
        while (true) {
          const double u = 1.0 - rng_.uniform();  // (0, 1]
          position += static_cast<std::size_t>(std::log(u) / log_keep);
          if (position >= free_bits) break;
          flip(rows + (position / gaps_) * words_, position % gaps_);
          ++position;
        }
      }
      if (rng_.uniform() < options_.move_rate) move_cut(rows);
    }
  }

  // Moves one cut of a random stage by 1..3 samples, when the target is free.
  void move_cut(Word* rows) {
    const auto s = rng_.below_fast(static_cast<std::uint32_t>(stages_));
    Word* row = rows + s * words_;
    // Movable cuts are bits 0 .. B-2; bit B-1 (the end) stays.
    const auto movable = [&](std::size_t w) {
      const std::size_t low = w * 64;
      if (gaps_ >= low + 64) return row[w];
      return gaps_ <= low ? Word{0} : row[w] & ((Word{1} << (gaps_ - low)) - 1);
    };
    std::uint32_t cuts = 0;
    for (std::size_t w = 0; w < words_; ++w) cuts += std::popcount(movable(w));
    if (cuts == 0) return;
    std::uint32_t pick = rng_.below_fast(cuts);
    std::size_t from = 0;
    for (std::size_t w = 0; w < words_; ++w) {
      Word word = movable(w);
      const auto here = static_cast<std::uint32_t>(std::popcount(word));
      if (pick >= here) {
        pick -= here;
        continue;
      }
      for (; pick > 0; --pick) word &= word - 1;
      from = w * 64 + std::countr_zero(word);
      break;
    }
    const int distance = 1 + static_cast<int>(rng_.below_fast(3));
    const long long to =
        static_cast<long long>(from) + (rng_.below_fast(2) == 0 ? -distance : distance);
    if (to < 0 || to >= static_cast<long long>(gaps_) || bit(row, static_cast<std::size_t>(to))) {
      return;
    }
    flip(row, from);
    flip(row, static_cast<std::size_t>(to));
  }

  // A single chromosome drives both directions.
  void tie(Genes genes) const {
    if (!options_.dual) std::copy_n(genes.begin(), chromosome_, genes.begin() + chromosome_);
  }

  const UmpipeProblem& problem_;
  UmpipeGaOptions options_;
  RngStream rng_;
  UmpipeEvaluator single_;
  UmpipeBatchEvaluator batch_;
  int stages_ = 0;
  std::size_t gaps_ = 0, words_ = 0, chromosome_ = 0, stride_ = 0;
  double flip_rate_ = 0;
  double best_ = 0;
  std::vector<Word> best_genes_;
  std::chrono::steady_clock::time_point start_;
};

void validate(const UmpipeGaOptions& options) {
  if (options.population < 2) throw std::invalid_argument("UMPIPE GA: population must be >= 2");
  if (options.generations < 0) throw std::invalid_argument("UMPIPE GA: generations must be >= 0");
  if (options.elites < 0 || options.elites >= options.population) {
    throw std::invalid_argument("UMPIPE GA: need 0 <= elites < population");
  }
  if (options.tournament < 1) throw std::invalid_argument("UMPIPE GA: tournament must be >= 1");
  for (const double rate : {options.crossover_rate, options.move_rate}) {
    if (!(rate >= 0 && rate <= 1)) throw std::invalid_argument("UMPIPE GA: rates lie in [0, 1]");
  }
  if (!(options.flip_rate <= 1)) throw std::invalid_argument("UMPIPE GA: flip_rate must be <= 1");
}

}  // namespace

UmpipeGaResult run_umpipe_ga(const UmpipeProblem& problem, const UmpipeGaOptions& options) {
  problem.validate();
  validate(options);
  return Ga(problem, options).run();
}

}  // namespace tandem::planner
