#include "kv/block_hash.h"

namespace kvscope {

namespace {
// xxHash64's primes and round: multiply-rotate-multiply diffuses each 32-bit token over the
// whole accumulator; the splitmix64 finaliser then avalanches every input bit into every output bit.
constexpr uint64_t kP1 = 0x9e3779b185ebca87ull;
constexpr uint64_t kP2 = 0xc2b2ae3d27d4eb4full;
constexpr uint64_t kP3 = 0x165667b19e3779f9ull;

constexpr uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
constexpr uint64_t mix_round(uint64_t acc, uint64_t v) { return rotl(acc + v * kP2, 31) * kP1; }
constexpr uint64_t splitmix_final(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

BlockHash block_hash(BlockHash parent_hash, std::span<const TokenId> tokens, uint64_t salt) {
  uint64_t acc = mix_round(kP3 ^ salt, parent_hash);
  acc = mix_round(acc, splitmix_final(salt + kP1));
  for (TokenId t : tokens) acc = mix_round(acc, static_cast<uint32_t>(t));
  acc = mix_round(acc, tokens.size());  // [1,2] and [1,2,0] must differ even where zeros would vanish
  return splitmix_final(acc);
}

}  // namespace kvscope
