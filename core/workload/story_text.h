#pragma once
// Seeded TinyStories-style English for generated workloads. The tiny story models the project
// tests with (stories260K) only know simple children's-story words, so prompts are built from
// such words and sentence templates; a prompt the model can read gives meaningful generations.
#include <cstdint>
#include <string>
#include <vector>

namespace kvscope {

// splitmix64: tiny, and unlike std::uniform_int_distribution it gives the same numbers with
// every standard library, so a seed names the same workload everywhere.
class WorkloadRng {
 public:
  explicit WorkloadRng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  int32_t uniform(int32_t lo, int32_t hi);  // inclusive; lo <= hi
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(uniform(0, static_cast<int32_t>(v.size()) - 1))];
  }

 private:
  uint64_t state_;
};

// The people and things one story is about; questions ask about these facts.
struct StoryCast {
  std::string name, friend_name;  // two different children
  std::string animal, object, place, adjective, feeling;
};

class StoryWriter {
 public:
  explicit StoryWriter(uint64_t seed) : rng_(seed) {}

  StoryCast cast();
  // A cast whose name is not in `used` (names are then unambiguous in a long document);
  // falls back to any name once all are taken.
  StoryCast cast_avoiding(const std::vector<std::string>& used);

  std::string opening(const StoryCast& c);   // "Once upon a time, ..."
  std::string sentence(const StoryCast& c);  // a random middle sentence about the cast
  // Opening, the sentences that state the cast's facts (object, place, friend, feeling), random
  // middle sentences up to n_sentences, and an ending. n_sentences >= 5.
  std::string story(const StoryCast& c, int n_sentences);
  // `n` sentences of a story (opening first), without the fact/ending guarantees: for short prompts.
  std::string snippet(const StoryCast& c, int n);
  // A question answered by the facts story() states, e.g. "Where did Lily play with the ball?"
  std::string question(const StoryCast& c);
  // A follow-up line for a chat turn, e.g. "Then Tom found a red kite. What did Tom do next?"
  std::string follow_up(const StoryCast& c);

  WorkloadRng& rng() { return rng_; }

  // The word lists, exposed so tests can check prompts stay within the simple vocabulary.
  static const std::vector<std::string>& names();
  static const std::vector<std::string>& animals();
  static const std::vector<std::string>& objects();
  static const std::vector<std::string>& places();
  static const std::vector<std::string>& adjectives();
  static const std::vector<std::string>& feelings();

 private:
  WorkloadRng rng_;
};

}  // namespace kvscope
