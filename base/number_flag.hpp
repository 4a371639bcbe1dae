// A CLI11 check of a number flag that says what was expected in words: "--lr: 'abc' is not
// a number; expected a learning rate of at least 0, e.g. 0.1" instead of CLI11's "Value abc
// not in range 0.000000 to 1797...(310 digits)". Infinity and NaN are not numbers a
// setting can take ("--lr nan" used to be blamed on --lr-schedule).
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace hearsay {

// What a number flag takes: [min, max] (max: none), in words, with an example.
struct NumberRange {
  double min = 0;
  std::optional<double> max;
  bool max_open = false;  // max itself excluded
  std::string what;       // "a learning rate", "the momentum"
  std::string example;    // "0.1"
  bool min_open = false;  // min itself excluded (after the others: existing brace lists stay valid)
};

// "" when text is a finite number in range; else why not, in words.
std::string check_number(const std::string& text, const NumberRange& range);
CLI::Validator number_in(NumberRange range);

// A number written for a flag so that parsing it gives back exactly `value`: the shortest
// text that reads back as the same float (or double), "2e-07", "0.1", "1.25". The
// simulator hands its peers their settings this way; std::to_string's six decimals had
// turned --lr 2e-7 into 0.000000.
std::string exact_flag_number(float value);
std::string exact_flag_number(double value);

}  // namespace hearsay
