// The logging facility: level filtering, capture through a sink, level names.
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/log.hpp"

using namespace hearsay;

TEST_CASE("log lines below the level are dropped, the rest reach the sink", "[wire][log]") {
  logging::CapturedLines captured(logging::Level::info);
  logging::debug("hidden");
  logging::info("shown");
  logging::error("also shown");
  REQUIRE_FALSE(logging::enabled(logging::Level::debug));
  REQUIRE(logging::enabled(logging::Level::warn));
  const auto lines = captured.lines();
  REQUIRE(lines.size() == 2);
  REQUIRE(lines[0].message == "shown");
  REQUIRE(lines[0].level == logging::Level::info);
  REQUIRE(lines[1].message == "also shown");
  REQUIRE(lines[1].level == logging::Level::error);
}

TEST_CASE("a capture restores the previous sink and level", "[wire][log]") {
  const auto before = logging::level();
  std::vector<std::string> outer;
  auto previous = logging::set_sink([&outer](logging::Level, std::string_view m) { outer.emplace_back(m); });
  logging::set_level(logging::Level::warn);
  {
    logging::CapturedLines inner(logging::Level::debug);
    logging::debug("to inner");
    REQUIRE(inner.lines().size() == 1);
  }
  REQUIRE(logging::level() == logging::Level::warn);
  logging::info("filtered");
  logging::warn("to outer");
  logging::set_sink(std::move(previous));
  logging::set_level(before);
  REQUIRE(outer == std::vector<std::string>{"to outer"});
}

TEST_CASE("lines from many threads arrive whole", "[wire][log]") {
  logging::CapturedLines captured(logging::Level::info);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([t] {
        for (int i = 0; i < 500; ++i)
          logging::info("thread " + std::to_string(t) + " line " + std::to_string(i));
      });
  }
  const auto lines = captured.lines();
  REQUIRE(lines.size() == 2000);
  // Every line exactly once and whole: no two merged, none cut or repeated.
  std::multiset<std::string> got, want;
  for (const auto& line : lines) got.insert(line.message);
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 500; ++i) want.insert("thread " + std::to_string(t) + " line " + std::to_string(i));
  REQUIRE(got == want);
}

TEST_CASE("level names parse and print", "[wire][log]") {
  for (auto l : {logging::Level::debug, logging::Level::info, logging::Level::warn, logging::Level::error,
                 logging::Level::off})
    REQUIRE(logging::parse_level(logging::to_string(l)) == l);
  REQUIRE(logging::parse_level("warning") == logging::Level::warn);
  REQUIRE_FALSE(logging::parse_level("loud").has_value());
  logging::CapturedLines captured(logging::Level::off);
  logging::error("not even errors");
  REQUIRE(captured.lines().empty());
}
