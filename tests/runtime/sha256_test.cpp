// SHA-256 against FIPS 180-4's examples (the digests `sha256sum` prints).
#include "runtime/sha256.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tandem {
namespace {

std::string digest(std::string_view text) {
  Sha256 h;
  h.update(text);
  return h.hex_digest();
}

TEST(Sha256, StandardVectors) {
  EXPECT_EQ(digest(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(digest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(digest(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Padding crosses a block boundary at 56 bytes; pieces of any size give the whole's digest.
TEST(Sha256, PiecewiseEqualsWhole) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += static_cast<char>('a' + i % 26);
  for (const std::size_t length : {55u, 56u, 63u, 64u, 65u, 119u, 120u, 300u}) {
    const std::string_view whole(text.data(), length);
    const std::string expected = digest(whole);
    for (const std::size_t piece : {1u, 7u, 63u, 64u, 100u}) {
      Sha256 h;
      for (std::size_t at = 0; at < length; at += piece) h.update(whole.substr(at, piece));
      EXPECT_EQ(h.hex_digest(), expected) << "length " << length << " piece " << piece;
    }
  }
  Sha256 reused;  // hex_digest resets
  reused.update("abc");
  reused.hex_digest();
  EXPECT_EQ(reused.hex_digest(), digest(""));
}

}  // namespace
}  // namespace tandem
