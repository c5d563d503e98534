#include "models/device_weights.h"

#include <algorithm>
#include <cstring>

#include "core/address_map.h"
#include "core/error.h"

namespace mx {

std::string LoadStats::describe() const {
  constexpr double MiB = 1048576.0;
  std::string s = fmt::format("read {:.1f} MiB of the checkpoint's {:.1f} MiB ({:.0f}%)", read_bytes / MiB,
                              checkpoint_bytes / MiB, checkpoint_bytes ? 100.0 * read_bytes / checkpoint_bytes : 0.0);
  s += fmt::format(", uploaded {:.1f} MiB, made {:.1f} MiB in place, host copies {:.1f} MiB, derived {:.1f} MiB",
                   uploaded_bytes / MiB, filled_bytes / MiB, host_copy_bytes / MiB, prepared_bytes / MiB);
  return s;
}

DeviceWeights::DeviceWeights(Backend& b, const DummyWeights* dummy, const TensorStore* store) : b_(b), dummy_(dummy) {
  if (!store) return;
  for (const std::string& n : store->names()) {
    const Tensor& t = store->get(n);
    stats_.checkpoint_bytes += t.nbytes();
    if (t.data && t.nbytes()) tensors_[static_cast<const char*>(t.data)] = {n, t.nbytes()};
  }
}

void DeviceWeights::record(const void* src, size_t bytes) {
  if (!bytes) return;
  if (deriving_) {
    stats_.prepared_bytes += bytes;
    return;
  }
  if (auto it = range_holding(tensors_, src, [](const auto& v) { return v.second; }); it != tensors_.end()) {
    stats_.read_bytes += bytes;
    stats_.read_by_tensor[it->second.first] += bytes;
    return;
  }
  if (tensors_.empty()) stats_.read_bytes += bytes;  // no store to name it: a checkpoint read all the same
  else stats_.prepared_bytes += bytes;                // not a checkpoint tensor: derived on the host by a block
}

DevWeight DeviceWeights::derived(const Tensor& t) {
  deriving_ = true;
  DevWeight w;
  try {
    w = matrix(t);
  } catch (...) {
    deriving_ = false;
    throw;
  }
  deriving_ = false;
  return w;
}

void DeviceWeights::count_read(const Tensor& t) {
  if (!t.empty()) record(t.data, t.storage_bytes());
}

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

DevWeight DeviceWeights::matrix(const WeightSlice& s) {
  if (s.empty()) return {};
  // A weight used twice is placed once; a slice of another (a tensor-parallel
  // rank's rows of a tied embedding, which start at the same address) is not it.
  const auto key = std::make_tuple(static_cast<const void*>(s.whole.data), s.rows(), s.c0, s.cols, int(s.whole.dtype));
  if (auto it = placed_.find(key); it != placed_.end()) return it->second;
  DevWeight w = stack({s})[0];
  placed_[key] = w;
  return w;
}

const float* DeviceWeights::vector(const Tensor& t) {
  if (t.empty()) return nullptr;
  record(t.data, t.nbytes());
  if (t.dtype == DType::F32 && b_.host_memory()) return t.as<float>();
  std::vector<float> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = load_as_f32(t.data, t.dtype, i);
  return floats(v);
}

const float* DeviceWeights::floats(const std::vector<float>& v) {
  if (b_.host_memory()) {
    host_vectors_.push_back(v);
    stats_.host_copy_bytes += v.size() * 4;
    return host_vectors_.back().data();
  }
  owned_.emplace_back(b_, std::max<size_t>(v.size(), 1) * 4);
  b_.upload(owned_.back().get(), v.data(), v.size() * 4);
  stats_.uploaded_bytes += v.size() * 4;
  return owned_.back().get<float>();
}

void DeviceWeights::put(void* dst, const void* src, size_t rows, size_t len, size_t stride) {
  if (!rows || !len) return;
  record(src, rows * len);
  if (dummy_ && dummy_->placeholder(src)) {
    dummy_->fill(b_, dst, src, rows, len, stride);
    stats_.filled_bytes += rows * len;
    return;
  }
  stats_.uploaded_bytes += rows * len;
  if (rows == 1 || len == stride) {  // contiguous: straight from the mapping
    b_.upload(dst, src, rows * len);
    return;
  }
  // Strided (a column slice): whole rows of it gathered into a bounded host
  // buffer, then uploaded; only the slice's own bytes of the mapping are read.
  const size_t per = std::max<size_t>(1, kStageBytes / len);
  stage_.resize(std::min(rows, per) * len);
  for (size_t r0 = 0; r0 < rows; r0 += per) {
    const size_t n = std::min(per, rows - r0);
    for (size_t r = 0; r < n; ++r)
      std::memcpy(stage_.data() + r * len, static_cast<const char*>(src) + (r0 + r) * stride, len);
    b_.upload(static_cast<char*>(dst) + r0 * len, stage_.data(), n * len);
  }
}

void DeviceWeights::put_slice(const WeightSlice& s, void* dst, void* dst_scales) {
  const Tensor& w = s.whole;
  const int64_t rows = w.shape[0], cols = w.shape[1], c0 = s.c0, n = s.cols;
  if (!s.sliced()) {
    const Tensor t = s.shape();
    put(dst, w.data, 1, t.nbytes(), t.nbytes());
    if (dst_scales) put(dst_scales, w.scales, 1, t.storage_bytes() - t.nbytes(), t.storage_bytes() - t.nbytes());
    return;
  }
  put(dst, static_cast<const char*>(w.data) + dtype_bytes(w.dtype, c0), size_t(rows), dtype_bytes(w.dtype, n),
      dtype_bytes(w.dtype, cols));
  if (!dst_scales) return;
  if (w.dtype == DType::MXFP4) {  // one E8M0 byte per 32 columns of each row
    put(dst_scales, static_cast<const uint8_t*>(w.scales) + c0 / 32, size_t(rows), size_t(n / 32), size_t(cols / 32));
  } else {  // FP8: one f32 per 128 x 128 block
    const int64_t rb = (rows + 127) / 128, cb = (cols + 127) / 128, nb = (n + 127) / 128;
    put(dst_scales, static_cast<const float*>(w.scales) + c0 / 128, size_t(rb), size_t(nb) * 4, size_t(cb) * 4);
  }
}

std::vector<DevWeight> DeviceWeights::stack(const std::vector<WeightSlice>& ts) {
  std::vector<DevWeight> out;
  if (b_.host_memory()) {
    for (const WeightSlice& s : ts) {
      if (s.empty()) {
        out.push_back({});
        continue;
      }
      if (!s.sliced()) {
        count_read(s.whole);
        out.push_back(describe(s.whole));
        continue;
      }
      // The CPU's memory is the host's: the slice's contiguous copy is its placed form.
      host_slices_.emplace_back();
      host_scales_.emplace_back();
      const Tensor t = copy_cols(s, host_slices_.back(), host_scales_.back());
      record(s.whole.data, t.storage_bytes());
      stats_.host_copy_bytes += t.storage_bytes();
      out.push_back(describe(t));
    }
    return out;
  }
  MX_CHECK(!ts.empty() && !ts[0].empty(), "stack of weights: an expert is missing on a device backend");
  const Tensor shape0 = ts[0].shape();
  const DevWeight w0 = describe(shape0);
  const size_t db = w0.data_bytes(), sb = w0.scale_bytes();
  owned_.emplace_back(b_, db * ts.size());
  char* data = owned_.back().get<char>();
  char* scales = nullptr;
  if (sb) {
    owned_.emplace_back(b_, sb * ts.size());
    scales = owned_.back().get<char>();
  }
  for (size_t e = 0; e < ts.size(); ++e) {
    MX_CHECK(!ts[e].empty(), "stack of weights: expert {} is missing on a device backend", e);
    const Tensor t = ts[e].shape();
    MX_CHECK(t.dtype == shape0.dtype && t.dims() == shape0.dims() && bool(t.scales) == bool(shape0.scales),
             "stack of weights: entries differ in dtype or shape");
    DevWeight w = w0;
    w.data = data + e * db;
    w.scales = sb ? scales + e * sb : nullptr;
    put_slice(ts[e], w.data, w.scales);
    out.push_back(w);
  }
  return out;
}

}  // namespace mx
