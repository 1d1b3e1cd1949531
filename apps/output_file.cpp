#include "apps/output_file.hpp"

#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <system_error>

#include "apps/usage_error.hpp"

namespace tandem::apps {
namespace {

bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ec;
  if (std::filesystem::equivalent(a, b, ec) && !ec) return true;
  // Neither exists yet, or one does not: compare what they would resolve to.
  const auto ca = std::filesystem::weakly_canonical(a, ec);
  if (ec) return false;
  const auto cb = std::filesystem::weakly_canonical(b, ec);
  return !ec && ca == cb;
}

}  // namespace

void check_output(std::string_view flag, const std::filesystem::path& output,
                  std::initializer_list<std::filesystem::path> inputs) {
  const std::string name(flag);
  if (output.empty()) throw UsageError(name + ": empty file name");
  std::error_code ec;
  if (std::filesystem::is_directory(output, ec)) {
    throw UsageError(name + ": '" + output.string() + "' is a directory; give a file name");
  }
  for (const auto& input : inputs) {
    if (!input.empty() && same_file(output, input)) {
      throw UsageError(name + ": '" + output.string() + "' is an input of this command ('" +
                       input.string() + "'); writing it would destroy that input");
    }
  }
}

void write_output(const std::filesystem::path& output, std::string_view text) {
  std::filesystem::path temporary = output;
  temporary += ".tmp" + std::to_string(::getpid());
  std::error_code ec;
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (out) out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) {
      std::filesystem::remove(temporary, ec);
      throw std::runtime_error("cannot write " + output.string());
    }
  }
  std::filesystem::rename(temporary, output, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw std::runtime_error("cannot write " + output.string() + ": " + ec.message());
  }
}

}  // namespace tandem::apps
