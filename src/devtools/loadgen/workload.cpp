#include "devtools/loadgen/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "core/error.h"

namespace mx::bench {

namespace {
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, sep)) out.push_back(part);
  return out;
}

double number(const std::string& s, const std::string& whole) {
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  fail("bad length distribution '{}': '{}' is not a number", whole, s);
}

int length_of(double v, const std::string& whole) {
  MX_CHECK(v >= 1 && v <= 1e7, "bad length distribution '{}': lengths must be in [1, 10000000]", whole);
  return int(std::lround(v));
}
}  // namespace

LengthDist LengthDist::parse(const std::string& s) {
  const std::vector<std::string> p = split(s, ':');
  MX_CHECK(!p.empty(), "empty length distribution");
  if (p.size() == 1) return fixed(length_of(number(p[0], s), s));
  LengthDist d;
  if (p[0] == "uniform" && p.size() == 3) {
    d.kind = Uniform;
    d.min = length_of(number(p[1], s), s);
    d.max = length_of(number(p[2], s), s);
    MX_CHECK(d.min <= d.max, "bad length distribution '{}': min > max", s);
    d.mean = 0.5 * (d.min + d.max);
    return d;
  }
  if (p[0] == "normal" && (p.size() == 3 || p.size() == 5)) {
    d.kind = Normal;
    d.mean = number(p[1], s);
    d.stddev = number(p[2], s);
    MX_CHECK(d.stddev >= 0, "bad length distribution '{}': negative stddev", s);
    length_of(d.mean, s);
    d.min = p.size() == 5 ? length_of(number(p[3], s), s) : 1;
    d.max = p.size() == 5 ? length_of(number(p[4], s), s) : length_of(d.mean + 4 * d.stddev + 1, s);
    MX_CHECK(d.min <= d.max, "bad length distribution '{}': min > max", s);
    return d;
  }
  fail("bad length distribution '{}': expected N, uniform:A:B or normal:MEAN:STDDEV[:MIN:MAX]", s);
}

std::string LengthDist::describe() const {
  switch (kind) {
    case Fixed: return fmt::format("{}", min);
    case Uniform: return fmt::format("uniform:{}:{}", min, max);
    case Normal: return fmt::format("normal:{}:{}:{}:{}", mean, stddev, min, max);
  }
  return "?";
}

LengthDist LengthDist::scaled(double f) const {
  auto s = [f](double v) { return std::max(1, int(std::lround(v * f))); };
  LengthDist d = *this;
  d.min = s(min);
  d.max = std::max(d.min, s(max));
  d.mean = std::max(1.0, mean * f);
  d.stddev = stddev * f;
  return d;
}

void WorkloadSpec::validate() const {
  MX_CHECK(shared_prefix >= 0 && shared_prefix < 1, "--shared-prefix must be in [0, 1), got {}", shared_prefix);
  MX_CHECK(request_rate >= 0 && std::isfinite(request_rate), "--request-rate must be >= 0");
  // Arrivals are waited for: at 1e-9 requests/s the second came in decades.
  MX_CHECK(request_rate == 0 || request_rate >= 1e-3,
           "--request-rate {} is below 0.001 requests/s (one every 17 minutes); 0 runs at fixed concurrency",
           request_rate);
  MX_CHECK(!concurrency.empty(), "--concurrency needs at least one value");
  for (int c : concurrency) MX_CHECK(c >= 1 && c <= 4096, "--concurrency values must be in [1, 4096], got {}", c);
  MX_CHECK(requests >= 0 && requests <= 1000000, "--requests must be in [0, 1000000]");
  MX_CHECK(duration_s >= 0, "--duration must be >= 0");
  MX_CHECK(vocab >= 4, "the vocabulary ({}) is too small to draw prompts from", vocab);
}

WorkloadSpec preset_workload(const std::string& name, double scale) {
  MX_CHECK(scale > 0 && scale <= 1000, "--scale must be in (0, 1000], got {}", scale);
  WorkloadSpec w;
  w.name = name;
  if (name == "aa-single") {
    w.input = LengthDist::fixed(10000).scaled(scale);
    w.output = LengthDist::fixed(1500).scaled(scale);
    w.concurrency = {1};
    w.requests = 3;
  } else if (name == "prefill-heavy") {
    w.input = LengthDist::fixed(20000).scaled(scale);
    w.output = LengthDist::fixed(1000).scaled(scale);
    w.shared_prefix = 0.6;
    w.concurrency = {1, 2, 4, 8, 16};
  } else {
    fail("unknown workload '{}' (aa-single, prefill-heavy or custom)", name);
  }
  return w;
}

int default_requests(const WorkloadSpec& spec, int concurrency) {
  return spec.requests ? spec.requests : std::max(4, 4 * concurrency);
}

std::vector<BenchRequest> make_requests(const WorkloadSpec& spec, int n, int point) {
  spec.validate();
  std::mt19937_64 rng(spec.seed * 1000003 + uint64_t(point));
  auto token = [&] { return int32_t(3 + rng() % uint64_t(spec.vocab - 3)); };
  auto draw = [&](const LengthDist& d) {
    switch (d.kind) {
      case LengthDist::Fixed: return d.min;
      case LengthDist::Uniform: return std::uniform_int_distribution<int>(d.min, d.max)(rng);
      case LengthDist::Normal: {
        const double v = std::normal_distribution<double>(d.mean, d.stddev)(rng);
        return std::clamp(int(std::lround(v)), d.min, d.max);
      }
    }
    return d.min;
  };
  // One prefix for the whole run (seed only, not the point): requests of later
  // points hit what earlier points cached, as a real shared system prompt would.
  std::mt19937_64 prefix_rng(spec.seed);
  std::vector<int32_t> prefix(size_t(std::lround(spec.shared_prefix * spec.input.max)));
  for (auto& t : prefix) t = int32_t(3 + prefix_rng() % uint64_t(spec.vocab - 3));

  std::exponential_distribution<double> gap(spec.request_rate > 0 ? spec.request_rate : 1.0);
  std::vector<BenchRequest> out(size_t(std::max(0, n)));
  double t = 0;
  for (auto& r : out) {
    const int len = draw(spec.input);
    r.shared_tokens = std::min(len, int(std::lround(spec.shared_prefix * len)));
    r.prompt.assign(prefix.begin(), prefix.begin() + r.shared_tokens);
    while (int(r.prompt.size()) < len) r.prompt.push_back(token());
    r.max_tokens = draw(spec.output);
    if (spec.request_rate > 0) {
      t += gap(rng);
      r.arrival_s = t;
    }
  }
  return out;
}

}  // namespace mx::bench
