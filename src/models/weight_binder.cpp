#include "models/weight_binder.h"

#include "core/error.h"

namespace mx {

namespace {
std::string shape_of(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}
}  // namespace

Tensor WeightBinder::bind(const std::string& name, const std::string& param,
                          std::vector<int64_t> shape, std::initializer_list<DType> dtypes,
                          bool required) {
  const Tensor* t = store_.find(name);
  if (!t) {
    if (required) missing_.push_back(fmt::format("{} (for {}, shape {})", name, param, shape_of(shape)));
    return {};
  }
  used_.insert(name);
  bool ok = true;
  if (t->dims() != shape) {
    wrong_shape_.push_back(fmt::format("{}: expected {}, found {}", name, shape_of(shape), t->shape_str()));
    ok = false;
  }
  bool dtype_ok = false;
  std::string allowed;
  for (DType d : dtypes) {
    dtype_ok |= d == t->dtype;
    allowed += std::string(allowed.empty() ? "" : "|") + dtype_name(d);
  }
  if (!dtype_ok) {
    wrong_dtype_.push_back(fmt::format("{}: expected {}, found {}", name, allowed, dtype_name(t->dtype)));
    ok = false;
  }
  if (!ok) return {};
  bound_.push_back({name, param, t->dtype, t->shape_str()});
  return *t;
}

Tensor WeightBinder::need(const std::string& name, const std::string& param,
                          std::vector<int64_t> shape, std::initializer_list<DType> dtypes) {
  return bind(name, param, std::move(shape), dtypes, true);
}

Tensor WeightBinder::linear(const std::string& prefix, const std::string& param, int64_t out,
                            int64_t in) {
  return bind(prefix + ".weight", param, {out, in}, {DType::F32, DType::BF16}, true);
}

Tensor WeightBinder::optional(const std::string& name, const std::string& param,
                              std::vector<int64_t> shape, std::initializer_list<DType> dtypes) {
  return bind(name, param, std::move(shape), dtypes, false);
}

void WeightBinder::ignore(const std::string& regex, const std::string& why) {
  ignores_.emplace_back(std::regex(regex), why);
}

const std::vector<BoundParam>& WeightBinder::finish() {
  std::vector<std::string> unused;
  for (const auto& name : store_.names()) {
    if (used_.count(name)) continue;
    bool ignored = false;
    for (const auto& [re, why] : ignores_)
      if (std::regex_match(name, re)) {
        bound_.push_back({name, "(ignored: " + why + ")", store_.get(name).dtype,
                          store_.get(name).shape_str()});
        ignored = true;
        break;
      }
    if (!ignored) unused.push_back(name);
  }
  if (missing_.empty() && unused.empty() && wrong_shape_.empty() && wrong_dtype_.empty())
    return bound_;
  std::string msg = "checkpoint does not match the model:";
  auto group = [&](const char* title, const std::vector<std::string>& v, const char* why = "") {
    if (v.empty()) return;
    msg += fmt::format("\n {} ({}){}:", title, v.size(), why);
    for (const auto& s : v) msg += "\n   " + s;
  };
  group("missing tensors", missing_);
  group("unused tensors", unused, ", consumed by no parameter and matched by no ignore rule");
  group("wrong shape", wrong_shape_);
  group("wrong dtype", wrong_dtype_);
  throw Error(msg);
}

}  // namespace mx
