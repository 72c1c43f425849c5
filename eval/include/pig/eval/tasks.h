// Downstream tasks of pig-eval, generated from a seed (no data set is downloaded): a needle in a
// haystack and RULER-like aggregation tasks (common-words and frequent-words extraction), the
// scoring of a model's answer, and the real English text used for perplexity. Pure functions of
// their inputs: the unit tests in tests/eval pin them without a model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pig::eval {

/// One generated task instance. `prompt` is the user message (the caller wraps it in the chat
/// template); `answer_prefix` is appended after the assistant turn starts (RULER does the same:
/// it steers the answer's format, not its content); `expected` are the words the answer must
/// contain.
struct TaskInstance {
  std::string name; ///< "needle", "multikey", "vt", "count", "cwe" or "fwe"
  std::string prompt;
  std::string answer_prefix;
  std::vector<std::string> expected;
  std::size_t size = 0; ///< the size parameter it was generated with (sentences / list items)
};

/// Needle retrieval: `size` filler sentences with "The special magic number is NNNNNNN." inserted
/// at relative depth `depth` in [0, 1] (0: before the first sentence), then the question.
TaskInstance MakeNeedle(std::size_t size, double depth, std::uint64_t seed);

/// Multi-key needle (RULER "niah_multikey_1"): `size` filler sentences with `keys` needles "One
/// of the special magic numbers for WORD is: NNNNNNN." at seeded depths, each for a different word
/// and number; asks for the number of one of the words (the others are distractors). keys >= 1.
TaskInstance MakeMultiKeyNeedle(std::size_t size, std::size_t keys, std::uint64_t seed);

/// Variable tracking (RULER "vt"): `size` filler sentences with a chain "VAR X1 = NNNNN.", then
/// "VAR X2 = VAR X1.", ..., X_{hops+1}, at ascending seeded depths, plus a second chain of the same
/// shape from another value as a distractor; asks for every variable assigned the first value.
/// `expected`: the hops + 1 names of the first chain (5 upper-case letters each). hops >= 1.
TaskInstance MakeVariableTracking(std::size_t size, std::size_t hops, std::uint64_t seed);

/// Counting: `size` filler sentences with one marker sentence ("The red fox jumped over the
/// WORD.", WORD seeded) inserted N times at seeded depths, N uniform in [min_count, max_count];
/// asks how many times it appears, answered in digits. `expected` is {N}. A model that always
/// answers the same number scores 1 / (max_count - min_count + 1) on average.
/// 1 <= min_count <= max_count <= 99.
TaskInstance MakeCounting(std::size_t size, std::size_t min_count, std::size_t max_count,
                          std::uint64_t seed);

/// Common-words extraction (RULER "cwe"): a numbered list of `size` words in which `n_common`
/// words appear `common_freq` times each and the rest of the list is filled with distinct words
/// appearing `rare_freq` times each (the last one possibly fewer); asks for the n_common most
/// common words.
TaskInstance MakeCommonWords(std::size_t size, std::size_t n_common, std::size_t common_freq,
                             std::size_t rare_freq, std::uint64_t seed);

/// Frequent-words extraction (RULER "fwe"): `size` coded words (random 3-6 letter strings) drawn
/// from a Zipf distribution of exponent `alpha` over a vocabulary; asks for the three most
/// frequent. `expected` are the three most frequent words of the generated text (ties are
/// impossible: the generator redraws until the top four counts differ).
TaskInstance MakeFrequentWords(std::size_t size, double alpha, std::uint64_t seed);

/// Words of an answer: maximal runs of ASCII letters and digits, lowercased.
std::vector<std::string> AnswerWords(std::string_view text);

/// Fraction of `expected` found among the answer's words (each expected word counts once; an
/// empty expected list scores 1).
double ScoreAnswer(std::string_view answer, const std::vector<std::string> &expected);

/// The counting task's score: 1 when the answer's first number (maximal run of ASCII digits) is
/// `expected`, else 0 (so listing several numbers does not score).
double ScoreFirstNumber(std::string_view answer, std::string_view expected);

/// Counts of every word of the CWE / FWE list, for the tests and for the report.
std::vector<std::pair<std::string, std::size_t>> WordCounts(std::string_view list_text);

} // namespace pig::eval
