// --step-time-dist: the virtual engine's distribution of step times (virtual_run.hpp).
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "peer/duration_flag.hpp"
#include "sim/virtual_run.hpp"

namespace hearsay::sim {

StepTimeDist parse_step_time_dist(const std::string& text) {
  const std::string form = "expected lognormal:MEDIAN,SIGMA, e.g. lognormal:60ms,0.5";
  const std::string prefix = "lognormal:";
  const auto comma = text.find(',');
  if (!text.starts_with(prefix) || comma == std::string::npos)
    throw std::invalid_argument("--step-time-dist '" + text + "': " + form);
  StepTimeDist d;
  d.median = parse_duration(text.substr(prefix.size(), comma - prefix.size()), "--step-time-dist");
  const std::string sigma = text.substr(comma + 1);
  char* end = nullptr;
  d.sigma = std::strtod(sigma.c_str(), &end);
  if (sigma.empty() || end != sigma.c_str() + sigma.size())
    throw std::invalid_argument("--step-time-dist '" + text + "': SIGMA '" + sigma + "' is not a number; " +
                                form);
  if (d.median <= std::chrono::nanoseconds::zero() || !(d.sigma >= 0) || d.sigma > 5)
    throw std::invalid_argument("--step-time-dist '" + text +
                                "': MEDIAN must be positive and SIGMA in [0, 5]; " + form);
  return d;
}

}  // namespace hearsay::sim
