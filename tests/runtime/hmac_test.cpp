// HMAC-SHA256 against RFC 4231's test vectors, and the constant-time comparison's answers.
#include "runtime/hmac.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tandem {
namespace {

std::span<const std::byte> bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

std::string hex(const Hmac256& h) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const std::uint8_t b : h) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

TEST(Hmac, Rfc4231Vectors) {
  EXPECT_EQ(hex(hmac_sha256(bytes(std::string(20, '\x0b')), bytes("Hi There"))),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(hmac_sha256(bytes("Jefe"), bytes("what do ya want for nothing?"))),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // A key longer than the block is hashed first.
  EXPECT_EQ(hex(hmac_sha256(bytes(std::string(131, '\xaa')),
                            bytes("Test Using Larger Than Block-Size Key - Hash Key First"))),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(Hmac, EmptyKeyAndEmptyData) {
  EXPECT_EQ(hex(hmac_sha256({}, {})),
            "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST(Hmac, ConstantTimeEquality) {
  const std::vector<std::uint8_t> a{1, 2, 3}, b{1, 2, 3}, c{1, 2, 4}, d{1, 2};
  EXPECT_TRUE(equal_in_constant_time(a, b));
  EXPECT_FALSE(equal_in_constant_time(a, c));
  EXPECT_FALSE(equal_in_constant_time(a, d));
  EXPECT_TRUE(equal_in_constant_time({}, {}));
}

TEST(RandomBytes, FillsAndDiffers) {
  std::vector<std::byte> x(32), y(32);
  random_bytes(x);
  random_bytes(y);
  EXPECT_NE(x, y);  // 2^-256 to fail
  EXPECT_NE(x, std::vector<std::byte>(32));
}

}  // namespace
}  // namespace tandem
