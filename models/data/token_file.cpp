#include "models/data/token_file.hpp"

#include <stdexcept>
#include <string>

#include "models/data/data_file_error.hpp"
#include "models/data/detail/read_file.hpp"

namespace tandem::models::data {

TokenFormat parse_token_format(std::string_view name) {
  if (name == "u8" || name == "uint8") return TokenFormat::u8;
  if (name == "u16" || name == "uint16") return TokenFormat::u16;
  throw std::invalid_argument("unknown token format '" + std::string(name) +
                              "' (expected u8 or u16)");
}

std::string_view token_format_name(TokenFormat format) {
  return format == TokenFormat::u8 ? "u8" : "u16";
}

std::vector<uint16_t> read_token_file(const std::filesystem::path& path, TokenFormat format,
                                      int64_t vocab) {
  const std::vector<unsigned char> bytes = detail::read_file(path);
  if (bytes.empty()) throw DataFileError(path, 0, "empty token file");
  const size_t width = format == TokenFormat::u8 ? 1 : 2;
  if (bytes.size() % width != 0) {
    throw DataFileError(path, bytes.size() - bytes.size() % width,
                        "file ends inside a " + std::to_string(width) + "-byte token (" +
                            std::to_string(bytes.size()) + " bytes)");
  }
  std::vector<uint16_t> tokens(bytes.size() / width);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const size_t at = i * width;
    const uint16_t t =
        width == 1 ? bytes[at] : static_cast<uint16_t>(bytes[at] | (bytes[at + 1] << 8));
    if (t >= vocab) {
      throw DataFileError(path, at,
                          "token " + std::to_string(t) + " >= vocab " + std::to_string(vocab));
    }
    tokens[i] = t;
  }
  return tokens;
}

}  // namespace tandem::models::data
