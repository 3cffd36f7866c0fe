// core/philox.hpp against the Random123 known-answer vectors.
#include <gtest/gtest.h>

#include "core/philox.hpp"

namespace tandem {
namespace {

void expect_kat(Philox4 ctr, uint32_t k0, uint32_t k1, Philox4 want) {
  const Philox4 got = philox4x32_10(ctr, k0, k1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want.v[i]) << "word " << i;
}

TEST(Philox4x32_10, KnownAnswers) {
  expect_kat({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}});
  expect_kat({{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u, {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}});
  expect_kat({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
             {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}});
}

TEST(Philox4x32_10, DrawsAreKeyedBySeedRequestAndPosition) {
  const Philox4 a = philox_draw(1, 2, 3), b = philox_draw(1, 2, 4), c = philox_draw(2, 2, 3);
  EXPECT_NE(a.v[0], b.v[0]);
  EXPECT_NE(a.v[0], c.v[0]);
  EXPECT_EQ(philox_draw(1, 2, 3).v[0], a.v[0]);
  EXPECT_GE(philox_uniform(0xffffffffu), 0.0f);
  EXPECT_LT(philox_uniform(0xffffffffu), 1.0f);
}

}  // namespace
}  // namespace tandem
