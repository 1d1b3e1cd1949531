#pragma once
// Raw token files: a flat array of token ids with no header, one byte per token (u8) or two
// little-endian bytes per token (u16, as nanoGPT's train.bin). Errors name the file and the
// byte offset of the problem.
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

namespace tandem::models::data {

enum class TokenFormat { u8, u16 };

TokenFormat parse_token_format(std::string_view name);  // "u8" | "uint8" | "u16" | "uint16"
std::string_view token_format_name(TokenFormat format);

// Reads every token; throws DataFileError when the file cannot be read, is empty, ends inside
// a token, or holds a token >= vocab.
std::vector<uint16_t> read_token_file(const std::filesystem::path& path, TokenFormat format,
                                      int64_t vocab);

}  // namespace tandem::models::data
