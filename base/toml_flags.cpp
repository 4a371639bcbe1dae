#include "base/toml_flags.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <cstdio>
#include <stdexcept>

namespace hearsay::toml_flags {

std::string_view kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::string:
      return "a string";
    case ValueKind::integer:
      return "an integer";
    case ValueKind::number:
      return "a number";
    case ValueKind::boolean:
      return "a boolean (true or false)";
    case ValueKind::duration:
      return "a duration (a string such as \"500ms\" or \"2s\", or a number of seconds)";
    case ValueKind::string_list:
      return "a string or an array of strings";
  }
  return "?";
}

std::string where(const std::string& file, const toml::source_region& source) {
  return file + ":" + std::to_string(source.begin.line);
}

std::string_view node_type_name(toml::node_type type) {
  switch (type) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a floating-point number";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date or time";
  }
}

namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

int closest_index(std::string_view name, const std::vector<std::string>& candidates) {
  int best = -1;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const std::size_t d = edit_distance(name, candidates[i]);
    if (d < best_distance) {
      best_distance = d;
      best = static_cast<int>(i);
    }
  }
  return best_distance <= std::max<std::size_t>(2, name.size() / 3) ? best : -1;
}

std::string closest(std::string_view name, const std::vector<std::string>& candidates) {
  const int i = closest_index(name, candidates);
  return i < 0 ? "" : "; did you mean '" + candidates[static_cast<std::size_t>(i)] + "'?";
}

std::vector<std::string> value_strings(const toml::node& value, ValueKind kind, const std::string& at,
                                       std::string_view key, std::string_view empty_hint) {
  const auto wrong = [&] {
    return std::invalid_argument(at + ": '" + std::string(key) + "' must be " + std::string(kind_name(kind)) +
                                 ", not " + std::string(node_type_name(value.type())));
  };
  switch (kind) {
    case ValueKind::string:
      if (auto s = value.value_exact<std::string>()) return {*s};
      break;
    case ValueKind::integer:
      if (auto i = value.value_exact<std::int64_t>()) return {std::to_string(*i)};
      break;
    case ValueKind::duration:
      if (auto s = value.value_exact<std::string>()) return {*s};
      [[fallthrough]];  // or a number of seconds
    case ValueKind::number:
      if (auto i = value.value_exact<std::int64_t>()) return {std::to_string(*i)};
      if (auto f = value.value_exact<double>()) {
        char buf[64];
        const auto r = std::to_chars(buf, buf + sizeof buf, *f);  // the shortest text that reads back as *f
        return {std::string(buf, r.ptr)};
      }
      break;
    case ValueKind::boolean:
      if (auto b = value.value_exact<bool>()) return {*b ? "true" : "false"};
      break;
    case ValueKind::string_list: {
      if (auto s = value.value_exact<std::string>()) return {*s};
      const toml::array* array = value.as_array();
      if (!array) break;
      // A flag cannot be given no value either (CLI11 refuses an empty list).
      if (array->empty())
        throw std::invalid_argument(at + ": '" + std::string(key) +
                                    "' = [] gives no value: leave the key out instead" +
                                    std::string(empty_hint));
      std::vector<std::string> items;
      for (const toml::node& item : *array) {
        auto s = item.value_exact<std::string>();
        if (!s) throw wrong();
        items.push_back(*s);
      }
      return items;
    }
  }
  throw wrong();
}

ValueKind kind_of(const CLI::Option& option) {
  if (option.get_expected_max() == 0) return ValueKind::boolean;  // a flag
  if (option.get_expected_max() > 1) return ValueKind::string_list;
  const std::string type = option.get_type_name();
  const auto starts = [&](std::string_view prefix) { return type.rfind(prefix, 0) == 0; };
  if (starts("DURATION")) return ValueKind::duration;
  if (starts("INT") || starts("UINT")) return ValueKind::integer;
  if (starts("FLOAT")) return ValueKind::number;
  if (starts("BOOLEAN")) return ValueKind::boolean;
  return ValueKind::string;
}

std::string toml_value(ValueKind kind, const std::string& text) {
  switch (kind) {
    case ValueKind::integer:
    case ValueKind::boolean:
      return text;
    case ValueKind::number: {
      // CLI11 read the text as a number already; TOML wants "0.5", not ".5" or "5.".
      double value = 0;
      const auto r = std::from_chars(text.data(), text.data() + text.size(), value);
      if (r.ec != std::errc() || r.ptr != text.data() + text.size()) break;
      char buf[64];
      const auto w = std::to_chars(buf, buf + sizeof buf, value);
      return std::string(buf, w.ptr);
    }
    default:
      break;
  }
  // A TOML basic string: quotes, backslashes and control characters escaped.
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04X", u);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void set_option(CLI::Option& option, std::string_view flag, const std::vector<std::string>& text,
                const std::string& at, std::string_view key) {
  try {
    if (option.get_expected_min() == 0) {
      option.add_result(option.get_flag_value(std::string(flag), text.front()));
    } else {
      option.add_result(text);
    }
    option.run_callback();
  } catch (const CLI::Error& e) {
    throw std::invalid_argument(at + ": '" + std::string(key) + "': " + e.what());
  }
}

}  // namespace hearsay::toml_flags
