#include "models/device_weights.h"

#include "core/error.h"

namespace mx {

DevWeight DeviceWeights::describe(const Tensor& t) const {
  MX_CHECK(t.ndim == 2, "weight {} is not 2-D", t.shape_str());
  MX_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::MXFP4 || t.dtype == DType::F8_E4M3,
           "{} weights are not supported on a backend (F32, BF16, MXFP4, F8_E4M3)", dtype_name(t.dtype));
  DevWeight w;
  w.dtype = t.dtype, w.out = t.shape[0], w.in = t.shape[1];
  if (w.dtype == DType::F8_E4M3 && t.scales) w.scale_cols = (w.in + 127) / 128;
  w.data = t.data;
  w.scales = const_cast<void*>(t.scales);
  return w;
}

DevWeight DeviceWeights::matrix(const Tensor& t) {
  if (t.empty()) return {};
  if (b_.host_memory()) return describe(t);
  // A weight used twice is placed once; a slice of another (a tensor-parallel
  // rank's rows of a tied embedding, which start at the same address) is not it.
  const auto key = std::make_tuple(static_cast<const void*>(t.data), t.shape[0], t.shape[1], int(t.dtype));
  if (auto it = placed_.find(key); it != placed_.end()) return it->second;
  DevWeight w = stack({&t})[0];
  placed_[key] = w;
  return w;
}

const float* DeviceWeights::vector(const Tensor& t) {
  if (t.empty()) return nullptr;
  if (t.dtype == DType::F32 && b_.host_memory()) return t.as<float>();
  std::vector<float> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = load_as_f32(t.data, t.dtype, i);
  return floats(v);
}

const float* DeviceWeights::floats(const std::vector<float>& v) {
  if (b_.host_memory()) {
    host_vectors_.push_back(v);
    return host_vectors_.back().data();
  }
  owned_.emplace_back(b_, std::max<size_t>(v.size(), 1) * 4);
  b_.upload(owned_.back().get(), v.data(), v.size() * 4);
  uploaded_ += v.size() * 4;
  return owned_.back().get<float>();
}

void DeviceWeights::put(void* dst, const void* src, size_t bytes) {
  if (dummy_ && dummy_->placeholder(src))
    dummy_->fill(b_, dst, src);
  else
    b_.upload(dst, src, bytes);
}

std::vector<DevWeight> DeviceWeights::stack(const std::vector<const Tensor*>& ts) {
  std::vector<DevWeight> out;
  if (b_.host_memory()) {
    for (const Tensor* t : ts) out.push_back(t && !t->empty() ? describe(*t) : DevWeight{});
    return out;
  }
  MX_CHECK(!ts.empty() && ts[0], "stack of weights: an expert is missing on a device backend");
  const DevWeight w0 = describe(*ts[0]);
  const size_t db = w0.data_bytes(), sb = w0.scale_bytes();
  owned_.emplace_back(b_, db * ts.size());
  char* data = owned_.back().get<char>();
  char* scales = nullptr;
  if (sb) {
    owned_.emplace_back(b_, sb * ts.size());
    scales = owned_.back().get<char>();
  }
  for (size_t e = 0; e < ts.size(); ++e) {
    MX_CHECK(ts[e] && !ts[e]->empty(), "stack of weights: expert {} is missing on a device backend", e);
    const Tensor& t = *ts[e];
    MX_CHECK(t.dtype == w0.dtype && t.shape == ts[0]->shape && bool(t.scales) == bool(ts[0]->scales),
             "stack of weights: entries differ in dtype or shape");
    DevWeight w = w0;
    w.data = data + e * db;
    w.scales = sb ? scales + e * sb : nullptr;
    put(w.data, t.data, db);
    if (sb) put(w.scales, t.scales, sb);
    out.push_back(w);
  }
  uploaded_ += (db + sb) * ts.size();
  return out;
}

}  // namespace mx
