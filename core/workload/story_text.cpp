// Sentence templates and word lists in the style of TinyStories (simple words a 260K-parameter
// story model has seen thousands of times).
#include "workload/story_text.h"

#include <algorithm>
#include <cassert>

namespace kvscope {

uint64_t WorkloadRng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int32_t WorkloadRng::uniform(int32_t lo, int32_t hi) {
  assert(lo <= hi);
  const uint64_t span = static_cast<uint64_t>(static_cast<int64_t>(hi) - lo) + 1;
  return static_cast<int32_t>(lo + static_cast<int64_t>(next() % span));  // bias is irrelevant here
}

const std::vector<std::string>& StoryWriter::names() {
  static const std::vector<std::string> v = {"Lily", "Tom",  "Ben",  "Mia",  "Sue", "Max", "Anna", "Sam",
                                             "Tim",  "Lucy", "Jack", "Sara", "Joe", "Amy", "Kate", "Bob"};
  return v;
}
const std::vector<std::string>& StoryWriter::animals() {
  static const std::vector<std::string> v = {"dog",  "cat",  "bird",  "bunny", "frog", "duck",
                                             "bear", "fish", "puppy", "mouse", "lion", "cow"};
  return v;
}
const std::vector<std::string>& StoryWriter::objects() {
  static const std::vector<std::string> v = {"ball", "toy",    "kite", "box",  "hat",     "car", "book",
                                             "cake", "flower", "boat", "doll", "balloon", "cup", "cookie"};
  return v;
}
const std::vector<std::string>& StoryWriter::places() {
  static const std::vector<std::string> v = {"park", "garden", "house", "forest", "beach",
                                             "pond", "farm",   "yard",  "room",   "town"};
  return v;
}
const std::vector<std::string>& StoryWriter::adjectives() {
  static const std::vector<std::string> v = {"big",    "little", "red",   "blue",   "shiny", "soft",
                                             "pretty", "funny",  "green", "yellow", "tiny",  "new"};
  return v;
}
const std::vector<std::string>& StoryWriter::feelings() {
  static const std::vector<std::string> v = {"happy", "sad",    "scared", "excited",
                                             "proud", "sleepy", "angry",  "surprised"};
  return v;
}

namespace {

void replace_all(std::string& s, const std::string& key, const std::string& value) {
  for (size_t pos = s.find(key); pos != std::string::npos; pos = s.find(key, pos + value.size()))
    s.replace(pos, key.size(), value);
}

// Middle sentences. {x} come from the cast (facts that stay true), {x2} are fresh random words
// (colour that questions never ask about). No vowel-initial words in the lists: no "a"/"an" rule.
const std::vector<std::string>& middle_templates() {
  static const std::vector<std::string> v = {
      "{name} liked to play in the {place} with a {adj} {object}.",
      "One day, {name} saw a {adj2} {animal2} near the {place2}.",
      "{name} was very {feeling}.",
      "They ran to the {place2} and played all day.",
      "{name} said, \"Look at my {object}! It is so {adj}.\"",
      "Mom said, \"Be careful, {name}. Do not lose your {object}.\"",
      "{name} and {friend} shared the {object} and they were {feeling2}.",
      "Then the {animal} jumped into the {place2}.",
      "{name} wanted to find a {adj2} {object2}.",
      "The sun was warm and the sky was blue.",
      "{friend} helped {name} look for the {object}.",
      "{name} smiled and gave a {object2} to {friend}.",
      "The {animal2} was {feeling2} because it lost its {object2}.",
      "{name} gave the {animal} a hug.",
      "They laughed and sang a song together.",
  };
  return v;
}

}  // namespace

StoryCast StoryWriter::cast() { return cast_avoiding({}); }

StoryCast StoryWriter::cast_avoiding(const std::vector<std::string>& used) {
  std::vector<std::string> free;
  for (const std::string& n : names())
    if (std::find(used.begin(), used.end(), n) == used.end()) free.push_back(n);
  if (free.size() < 2) free = names();
  StoryCast c;
  c.name = rng_.pick(free);
  do c.friend_name = rng_.pick(free);
  while (c.friend_name == c.name);
  c.animal = rng_.pick(animals());
  c.object = rng_.pick(objects());
  c.place = rng_.pick(places());
  c.adjective = rng_.pick(adjectives());
  c.feeling = rng_.pick(feelings());
  return c;
}

namespace {

std::string fill(std::string t, const StoryCast& c, WorkloadRng& rng) {
  replace_all(t, "{name}", c.name);
  replace_all(t, "{friend}", c.friend_name);
  replace_all(t, "{animal2}", rng.pick(StoryWriter::animals()));
  replace_all(t, "{object2}", rng.pick(StoryWriter::objects()));
  replace_all(t, "{place2}", rng.pick(StoryWriter::places()));
  replace_all(t, "{adj2}", rng.pick(StoryWriter::adjectives()));
  replace_all(t, "{feeling2}", rng.pick(StoryWriter::feelings()));
  replace_all(t, "{animal}", c.animal);
  replace_all(t, "{object}", c.object);
  replace_all(t, "{place}", c.place);
  replace_all(t, "{adj}", c.adjective);
  replace_all(t, "{feeling}", c.feeling);
  return t;
}

}  // namespace

std::string StoryWriter::opening(const StoryCast& c) {
  static const std::vector<std::string> v = {
      "Once upon a time, there was a little child named {name}.",
      "Once upon a time, {name} lived in a small house with a {animal}.",
      "One day, {name} woke up and felt {feeling}.",
      "There was a {adj2} {animal} who lived near the {place2}.",
  };
  return fill(rng_.pick(v), c, rng_);
}

std::string StoryWriter::sentence(const StoryCast& c) { return fill(rng_.pick(middle_templates()), c, rng_); }

std::string StoryWriter::story(const StoryCast& c, int n_sentences) {
  assert(n_sentences >= 5);
  // The fact sentences come first, in a fixed order, so question() always has an answer in the text.
  std::vector<std::string> s = {
      "Once upon a time, there was a child named " + c.name + " who had a " + c.animal + ".",
      c.name + " liked to play in the " + c.place + " with a " + c.adjective + " " + c.object + ".",
      "One day, " + c.friend_name + " came to the " + c.place + " to play with " + c.name + ".",
  };
  // Middle sentences without repeats (a shuffled deck of templates), so a story does not say
  // the same thing twice.
  const std::vector<std::string>& deck = middle_templates();
  std::vector<size_t> order(deck.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (size_t i = order.size() - 1; i > 0; --i)
    std::swap(order[i], order[static_cast<size_t>(rng_.uniform(0, static_cast<int32_t>(i)))]);
  for (size_t k = 0; static_cast<int>(s.size()) < n_sentences - 1; ++k)
    s.push_back(fill(deck[order[k % order.size()]], c, rng_));
  s.push_back("At the end of the day, " + c.name + " went home and felt " + c.feeling + ".");
  std::string out;
  for (const std::string& x : s) {
    if (!out.empty()) out += ' ';
    out += x;
  }
  return out;
}

std::string StoryWriter::snippet(const StoryCast& c, int n) {
  std::string out = opening(c);
  for (int i = 1; i < n; ++i) {
    out += ' ';
    out += sentence(c);
  }
  return out;
}

std::string StoryWriter::question(const StoryCast& c) {
  const std::vector<std::string> v = {
      "What did " + c.name + " like to play with?", "Where did " + c.name + " like to play?",
      "Who came to play with " + c.name + "?",      "How did " + c.name + " feel at the end of the day?",
      "What animal did " + c.name + " have?",
  };
  return rng_.pick(v);
}

std::string StoryWriter::follow_up(const StoryCast& c) {
  static const std::vector<std::string> v = {
      "Then {name} found a {adj2} {object2}. What did {name} do next?", "What did {friend} say to {name}?",
      "Tell me what happened when the {animal2} came to the {place}.",  "Why was {name} {feeling}?",
      "Then it started to rain. What did {name} and {friend} do?",      "What did Mom say when {name} came home?",
  };
  return fill(rng_.pick(v), c, rng_);
}

}  // namespace kvscope
