#include "models/weight_binder.h"

#include <algorithm>

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
  if (dummy_ && required && !store_.find(name)) make_dummy(name, shape, dtypes);
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
  bound_.push_back({name, param, t->dtype, t->shape_str(), "", t->numel()});
  return *t;
}

Tensor WeightBinder::need(const std::string& name, const std::string& param,
                          std::vector<int64_t> shape, std::initializer_list<DType> dtypes) {
  return bind(name, param, std::move(shape), dtypes, true);
}

Tensor WeightBinder::linear(const std::string& prefix, const std::string& param, int64_t out,
                            int64_t in) {
  const std::string wname = prefix + ".weight";
  if (dummy_ && !store_.contains(wname)) make_dummy_linear(prefix, out, in, quant_.quantized(prefix));
  const bool has_mx = store_.contains(prefix + ".weight_scale");
  const bool has_fp8 = store_.contains(prefix + ".weight_scale_inv");
  const bool want = quant_.quantized(prefix);
  auto mismatch = [&](const std::string& what) {
    quant_mismatch_.push_back(fmt::format("{}: {}", prefix, what));
    used_.insert(wname);
    used_.insert(prefix + ".weight_scale");
    used_.insert(prefix + ".weight_scale_inv");
    return Tensor();
  };
  if ((has_mx || has_fp8) && quant_.method == QuantMethod::None)
    return mismatch("stored quantized, but config.json has no quantization_config");
  if (has_mx && quant_.method == QuantMethod::Fp8Block)
    return mismatch("stored as MXFP4 (weight_scale), but the quantization_config is fp8");
  if (has_fp8 && quant_.method == QuantMethod::Mxfp4)
    return mismatch("stored as FP8 (weight_scale_inv), but the quantization_config is quark mxfp4");
  if (want && !has_mx && !has_fp8 && store_.contains(wname))
    return mismatch(fmt::format("the quantization_config ({}) says it is quantized, but it is stored "
                                "unquantized ({}); exclude it in the config or quantize it",
                                quant_.method_name(), dtype_name(store_.get(wname).dtype)));
  if (!want && (has_mx || has_fp8))
    return mismatch("stored quantized, but the quantization_config excludes it");
  if (!want) {
    Tensor t = bind(wname, param, {out, in}, {DType::F32, DType::BF16}, true);
    if (!t.empty()) bound_.back().linear = prefix;
    return t;
  }
  if (has_mx) {
    if (in % 32) return mismatch(fmt::format("MXFP4 needs in_features divisible by 32, got {}", in));
    Tensor packed = bind(wname, param, {out, in / 2}, {DType::U8}, true);
    if (!packed.empty()) {
      BoundParam& b = bound_.back();
      b.linear = prefix;
      b.dtype = DType::MXFP4;  // two E2M1 values per stored byte
      b.shape = fmt::format("[{}, {}] (stored U8 {})", out, in, b.shape);
      b.params = out * in;
    }
    Tensor sc = bind(prefix + ".weight_scale", param + " (e8m0 scales)", {out, in / 32}, {DType::U8}, true);
    if (!sc.empty()) bound_.back().linear = prefix, bound_.back().params = 0;
    if (packed.empty() || sc.empty()) return {};
    Tensor t(DType::MXFP4, {out, in}, packed.data);
    t.scales = sc.data;
    return t;
  }
  Tensor w = bind(wname, param, {out, in}, {DType::F8_E4M3}, true);
  if (!w.empty()) bound_.back().linear = prefix;
  Tensor sc = bind(prefix + ".weight_scale_inv", param + " (block scales)", {(out + 127) / 128, (in + 127) / 128},
                   {DType::F32}, true);
  if (!sc.empty()) bound_.back().linear = prefix, bound_.back().params = 0;
  if (w.empty() || sc.empty()) return {};
  w.scales = sc.data;
  return w;
}

Tensor WeightBinder::optional(const std::string& name, const std::string& param,
                              std::vector<int64_t> shape, std::initializer_list<DType> dtypes) {
  return bind(name, param, std::move(shape), dtypes, false);
}

void WeightBinder::make_missing(TensorStore& store, DummyWeights& dummy, DType plain) {
  MX_CHECK(&store == &store_, "make_missing: not the store this binder reads");
  MX_CHECK(plain == DType::F32 || plain == DType::BF16, "dummy weights: plain dtype {} (F32 or BF16)", dtype_name(plain));
  dummy_store_ = &store, dummy_ = &dummy, dummy_plain_ = plain;
}

Tensor WeightBinder::on_host(const Tensor& t) { return dummy_ ? dummy_->on_host(t) : t; }

// Ranges: dummy_weights.h.
void WeightBinder::make_dummy(const std::string& name, const std::vector<int64_t>& shape,
                              std::initializer_list<DType> dtypes) {
  auto allowed = [&](DType d) { return std::find(dtypes.begin(), dtypes.end(), d) != dtypes.end(); };
  const DType want = shape.size() == 1 ? DType::F32 : dummy_plain_;
  const DType dt = allowed(want) ? want : *dtypes.begin();
  const bool norm = name.find("norm") != std::string::npos;
  dummy_->add(*dummy_store_, name, dt, shape, norm ? 0.9f : -0.035f, norm ? 1.1f : 0.035f);
}

void WeightBinder::make_dummy_linear(const std::string& prefix, int64_t out, int64_t in, bool quantized) {
  TensorStore& st = *dummy_store_;
  const std::string w = prefix + ".weight";
  if (quantized && quant_.method == QuantMethod::Mxfp4 && in % 32 == 0) {
    dummy_->add(st, w, DType::U8, {out, in / 2}, 0, 255);
    dummy_->add(st, prefix + ".weight_scale", DType::U8, {out, in / 32}, 119, 121);
  } else if (quantized && quant_.method == QuantMethod::Fp8Block) {
    dummy_->add(st, w, DType::F8_E4M3, {out, in}, -1.0f, 1.0f);
    dummy_->add(st, prefix + ".weight_scale_inv", DType::F32, {(out + 127) / 128, (in + 127) / 128}, 0.03f, 0.04f);
  } else {
    dummy_->add(st, w, dummy_plain_, {out, in}, -0.035f, 0.035f);
  }
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
        bound_.push_back({name, "(ignored: " + why + ")", store_.get(name).dtype, store_.get(name).shape_str(), "", 0});
        ignored = true;
        break;
      }
    if (!ignored) unused.push_back(name);
  }
  if (missing_.empty() && unused.empty() && wrong_shape_.empty() && wrong_dtype_.empty() &&
      quant_mismatch_.empty())
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
  group("quantization mismatch", quant_mismatch_);
  throw Error(msg);
}

}  // namespace mx
