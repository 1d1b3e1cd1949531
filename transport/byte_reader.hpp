#pragma once
// Reads the little-endian fields of a byte string front to back, each read checked against the
// bytes left: the one reader of both wire formats, the control plane's frames
// (transport/control_frame.hpp) and the data plane's messages (transport/wire_message.hpp).
// Each format derives its reader from it and says how a failure is reported (its error type,
// naming its frame and the field).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace tandem::transport {

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> in) : in_(in) {}
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  std::uint8_t u8(std::string_view field) { return static_cast<std::uint8_t>(get(field, 1)); }
  std::uint16_t u16(std::string_view field) { return static_cast<std::uint16_t>(get(field, 2)); }
  std::uint32_t u32(std::string_view field) { return static_cast<std::uint32_t>(get(field, 4)); }
  std::uint64_t u64(std::string_view field) { return get(field, 8); }

  // The next n bytes, as a view into the input.
  std::span<const std::byte> take(std::string_view field, std::size_t n) {
    need(field, n);
    const std::span<const std::byte> b = in_.subspan(pos_, n);
    pos_ += n;
    return b;
  }
  void raw(std::string_view field, void* out, std::size_t n) {
    const std::span<const std::byte> b = take(field, n);
    if (n > 0) std::memcpy(out, b.data(), n);
  }

  std::size_t left() const { return in_.size() - pos_; }

  // Throws the format's error for `field`.
  [[noreturn]] virtual void fail(std::string_view field, const std::string& why) const = 0;

 protected:
  ~ByteReader() = default;

 private:
  void need(std::string_view field, std::size_t n) const {
    if (n > left()) {
      fail(field, "needs " + std::to_string(n) + " bytes but only " + std::to_string(left()) +
                      " remain (truncated frame)");
    }
  }
  std::uint64_t get(std::string_view field, int n) {
    const std::span<const std::byte> b = take(field, static_cast<std::size_t>(n));
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) {
      v |= std::uint64_t{std::to_integer<std::uint8_t>(b[static_cast<std::size_t>(i)])} << (8 * i);
    }
    return v;
  }

  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

}  // namespace tandem::transport
