#include "formats/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/mapped_file.h"

namespace mx {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr size_t kMaxTensorName = 63;    // ggml's GGML_MAX_NAME (64) includes the NUL
constexpr int kMaxDims = 4;
constexpr int kMaxArrayDepth = 16;

// Bytes of one element of a fixed-size type; 0 for STRING/ARRAY/unknown.
uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
    case GgufType::UINT16: case GgufType::INT16: return 2;
    case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
    case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
    default: return 0;
  }
}

bool valid_type(uint32_t t) { return t <= uint32_t(GgufType::FLOAT64); }

bool is_int_type(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::UINT16: case GgufType::INT16:
    case GgufType::UINT32: case GgufType::INT32: case GgufType::UINT64: case GgufType::INT64:
      return true;
    default: return false;
  }
}
bool is_signed_type(GgufType t) {
  return t == GgufType::INT8 || t == GgufType::INT16 || t == GgufType::INT32 || t == GgufType::INT64;
}

// Raw scalar at p of type t: unsigned integers and bools zero-extended, signed
// integers sign-extended into two's complement, floats as their bit pattern.
uint64_t load_scalar_bits(const uint8_t* p, GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::BOOL: return p[0];
    case GgufType::INT8: return uint64_t(int64_t(int8_t(p[0])));
    case GgufType::UINT16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case GgufType::INT16: { int16_t v; std::memcpy(&v, p, 2); return uint64_t(int64_t(v)); }
    case GgufType::UINT32: case GgufType::FLOAT32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    case GgufType::INT32: { int32_t v; std::memcpy(&v, p, 4); return uint64_t(int64_t(v)); }
    default: { uint64_t v; std::memcpy(&v, p, 8); return v; }
  }
}

double bits_to_double(uint64_t bits, GgufType t) {
  if (t == GgufType::FLOAT32) {
    float f;
    uint32_t b = uint32_t(bits);
    std::memcpy(&f, &b, 4);
    return f;
  }
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

const GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4},          {1, "F16", 1, 2},          {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},       {6, "Q5_0", 32, 22},       {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},       {9, "Q8_1", 32, 36},       {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},    {12, "Q4_K", 256, 144},    {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},    {15, "Q8_K", 256, 292},    {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},   {18, "IQ3_XXS", 256, 98},  {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},    {21, "IQ3_S", 256, 110},   {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136},  {24, "I8", 1, 1},          {25, "I16", 1, 2},
    {26, "I32", 1, 4},         {27, "I64", 1, 8},         {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},    {30, "BF16", 1, 2},        {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},    {39, "MXFP4", 32, 17},     {40, "NVFP4", 64, 36},
};

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::UINT8: return "UINT8";
    case GgufType::INT8: return "INT8";
    case GgufType::UINT16: return "UINT16";
    case GgufType::INT16: return "INT16";
    case GgufType::UINT32: return "UINT32";
    case GgufType::INT32: return "INT32";
    case GgufType::FLOAT32: return "FLOAT32";
    case GgufType::BOOL: return "BOOL";
    case GgufType::STRING: return "STRING";
    case GgufType::ARRAY: return "ARRAY";
    case GgufType::UINT64: return "UINT64";
    case GgufType::INT64: return "INT64";
    case GgufType::FLOAT64: return "FLOAT64";
  }
  return "?";
}

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const auto& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

std::vector<GgmlTypeInfo> ggml_types() { return {std::begin(kGgmlTypes), std::end(kGgmlTypes)}; }

// ---- GgufArray / GgufValue ----

bool GgufArray::is_numeric() const { return scalar_size(elem_type) != 0; }

int64_t GgufArray::int_at(uint64_t i) const {
  if (!is_int_type(elem_type) && elem_type != GgufType::BOOL)
    fail("array of {} read as integers", gguf_type_name(elem_type));
  if (i >= count) fail("array index {} out of range ({} elements)", i, count);
  uint64_t bits = load_scalar_bits(data + i * scalar_size(elem_type), elem_type);
  if (elem_type == GgufType::UINT64 && bits > uint64_t(std::numeric_limits<int64_t>::max()))
    fail("array element {} = {} does not fit int64", i, bits);
  return int64_t(bits);
}

double GgufArray::float_at(uint64_t i) const {
  if (i >= count) fail("array index {} out of range ({} elements)", i, count);
  if (elem_type == GgufType::FLOAT32 || elem_type == GgufType::FLOAT64)
    return bits_to_double(load_scalar_bits(data + i * scalar_size(elem_type), elem_type), elem_type);
  if (elem_type == GgufType::UINT64)
    return double(load_scalar_bits(data + i * 8, elem_type));
  return double(int_at(i));
}

bool GgufValue::is_integer() const { return is_int_type(type_); }

uint64_t GgufValue::as_u64(std::string_view what) const {
  if (!is_integer()) fail("{} is {}, expected an integer", what, gguf_type_name(type_));
  if (is_signed_type(type_) && int64_t(u_) < 0) fail("{} = {} is negative, expected an unsigned integer", what, int64_t(u_));
  return u_;
}

int64_t GgufValue::as_i64(std::string_view what) const {
  if (!is_integer()) fail("{} is {}, expected an integer", what, gguf_type_name(type_));
  if (type_ == GgufType::UINT64 && u_ > uint64_t(std::numeric_limits<int64_t>::max()))
    fail("{} = {} does not fit a signed 64-bit integer", what, u_);
  return int64_t(u_);
}

uint32_t GgufValue::as_u32(std::string_view what) const {
  uint64_t v = as_u64(what);
  if (v > std::numeric_limits<uint32_t>::max()) fail("{} = {} does not fit 32 bits", what, v);
  return uint32_t(v);
}

int32_t GgufValue::as_i32(std::string_view what) const {
  int64_t v = as_i64(what);
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    fail("{} = {} does not fit a signed 32-bit integer", what, v);
  return int32_t(v);
}

double GgufValue::as_f64(std::string_view what) const {
  if (!is_float()) fail("{} is {}, expected FLOAT32 or FLOAT64", what, gguf_type_name(type_));
  return f_;
}

bool GgufValue::as_bool(std::string_view what) const {
  if (type_ != GgufType::BOOL) fail("{} is {}, expected BOOL", what, gguf_type_name(type_));
  return u_ != 0;
}

std::string_view GgufValue::as_string(std::string_view what) const {
  if (type_ != GgufType::STRING) fail("{} is {}, expected STRING", what, gguf_type_name(type_));
  return s_;
}

const GgufArray& GgufValue::as_array(std::string_view what) const {
  if (type_ != GgufType::ARRAY) fail("{} is {}, expected ARRAY", what, gguf_type_name(type_));
  return *arr_;
}

std::string GgufValue::to_string(size_t max_items) const {
  switch (type_) {
    case GgufType::STRING: {
      std::string s(s_.substr(0, 200));
      return fmt::format("\"{}\"{}", s, s_.size() > 200 ? "..." : "");
    }
    case GgufType::BOOL: return u_ ? "true" : "false";
    case GgufType::FLOAT32: case GgufType::FLOAT64: return fmt::format("{}", f_);
    case GgufType::ARRAY: {
      const GgufArray& a = *arr_;
      std::string s = fmt::format("{}[{}] [", gguf_type_name(a.elem_type), a.count);
      uint64_t n = std::min<uint64_t>(a.count, max_items);
      for (uint64_t i = 0; i < n; ++i) {
        if (i) s += ", ";
        if (a.elem_type == GgufType::STRING) s += fmt::format("\"{}\"", a.strings[i].substr(0, 40));
        else if (a.elem_type == GgufType::ARRAY) s += a.arrays[i].to_string(max_items);
        else if (a.elem_type == GgufType::FLOAT32 || a.elem_type == GgufType::FLOAT64) s += fmt::format("{}", a.float_at(i));
        else if (a.elem_type == GgufType::UINT64) s += fmt::format("{}", load_scalar_bits(a.data + i * 8, a.elem_type));
        else s += fmt::format("{}", a.int_at(i));
      }
      if (a.count > n) s += ", ...";
      return s + "]";
    }
    default:
      if (is_signed_type(type_)) return fmt::format("{}", int64_t(u_));
      return fmt::format("{}", u_);
  }
}

// ---- GgufTensorInfo ----

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string GgufTensorInfo::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// ---- parser ----

class GgufParser {
 public:
  GgufParser(const std::string& path, const uint8_t* base, uint64_t size)
      : path_(path), base_(base), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      fail("{}: {} at offset {} needs {} bytes but the file ends {} bytes later (truncated?)", path_, what,
           pos_, n, remaining());
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string_view read_string(std::string_view what) {
    uint64_t len = read<uint64_t>(what);
    if (len > remaining())
      fail("{}: {} has length {} at offset {}, more than the {} bytes left in the file (corrupt or truncated)",
           path_, what, len, pos_ - 8, remaining());
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), size_t(len));
    pos_ += len;
    return s;
  }

  GgufValue read_value(GgufType t, const std::string& what, int depth) {
    GgufValue v;
    v.type_ = t;
    if (t == GgufType::STRING) {
      v.s_ = read_string(what);
    } else if (t == GgufType::ARRAY) {
      if (depth >= kMaxArrayDepth) fail("{}: {} nests arrays deeper than {} levels", path_, what, kMaxArrayDepth);
      uint32_t et = read<uint32_t>(what + " element type");
      if (!valid_type(et)) fail("{}: {} has unknown array element type {}", path_, what, et);
      auto arr = std::make_shared<GgufArray>();
      arr->elem_type = GgufType(et);
      uint64_t count = read<uint64_t>(what + " array count");
      // Smallest encoding of one element: its fixed size, a string's length
      // field, or a nested array's type + count.
      uint64_t min_elem = scalar_size(arr->elem_type);
      if (arr->elem_type == GgufType::STRING) min_elem = 8;
      if (arr->elem_type == GgufType::ARRAY) min_elem = 12;
      if (count > remaining() / min_elem)
        fail("{}: {} claims {} {} elements ({} bytes at least) but only {} bytes are left in the file "
             "(corrupt or truncated)",
             path_, what, count, gguf_type_name(arr->elem_type),
             count > std::numeric_limits<uint64_t>::max() / min_elem ? std::string("2^64+")
                                                                      : std::to_string(count * min_elem),
             remaining());
      arr->count = count;
      if (arr->is_numeric()) {
        arr->data = base_ + pos_;
        pos_ += count * min_elem;
      } else if (arr->elem_type == GgufType::STRING) {
        arr->strings.reserve(size_t(count));
        for (uint64_t i = 0; i < count; ++i) arr->strings.push_back(read_string(what + " element"));
      } else {
        arr->arrays.reserve(size_t(count));
        for (uint64_t i = 0; i < count; ++i)
          arr->arrays.push_back(read_value(GgufType::ARRAY, fmt::format("{}[{}]", what, i), depth + 1));
      }
      v.arr_ = std::move(arr);
    } else {
      uint64_t n = scalar_size(t);
      need(n, what);
      v.u_ = load_scalar_bits(base_ + pos_, t);
      pos_ += n;
      if (v.is_float()) v.f_ = bits_to_double(v.u_, t);
    }
    return v;
  }

 private:
  const std::string& path_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

GgufFile::~GgufFile() = default;
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;

GgufFile::GgufFile(const std::string& path) : GgufFile(std::make_shared<MappedFile>(path)) {}

GgufFile::GgufFile(std::shared_ptr<MappedFile> file) : path_(file->path()), file_(std::move(file)) {
  const uint8_t* base = file_->data();
  const uint64_t size = file_->size();
  GgufParser r(path_, base, size);

  if (size < 4) fail("{}: file is {} bytes, too short for a GGUF header", path_, size);
  uint32_t magic = r.read<uint32_t>("magic");
  if (magic != kMagic) {
    std::string shown;
    for (int i = 0; i < 4; ++i) {
      char c = char(base[i]);
      shown += (c >= 0x20 && c < 0x7f) ? std::string(1, c) : fmt::format("\\x{:02x}", uint8_t(c));
    }
    fail("{}: bad magic '{}': not a GGUF file (expected 'GGUF')", path_, shown);
  }
  version_ = r.read<uint32_t>("version");
  if (version_ == 1) fail("{}: GGUF version 1 is not supported (only versions 2 and 3)", path_);
  if (version_ != 2 && version_ != 3) {
    if ((version_ & 0xFFFF) == 0)
      fail("{}: GGUF version {:#x} looks byte-swapped: big-endian GGUF files are not supported", path_, version_);
    fail("{}: unsupported GGUF version {} (only versions 2 and 3)", path_, version_);
  }
  const uint64_t n_tensors = r.read<uint64_t>("tensor count");
  const uint64_t n_kv = r.read<uint64_t>("metadata key-value count");
  // A key-value pair takes at least 13 bytes (key length, type, 1-byte value),
  // a tensor info at least 24 (name length, n_dims, type, offset).
  if (n_kv > r.remaining() / 13)
    fail("{}: metadata key-value count {} cannot fit in the {} bytes after the header (corrupt file)", path_,
         n_kv, r.remaining());
  if (n_tensors > r.remaining() / 24)
    fail("{}: tensor count {} cannot fit in the {} bytes after the header (corrupt file)", path_, n_tensors,
         r.remaining());

  kv_.reserve(size_t(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key(r.read_string(fmt::format("metadata key #{}", i)));
    const std::string what = fmt::format("metadata '{}'", key);
    uint32_t t = r.read<uint32_t>(what + " value type");
    if (!valid_type(t)) fail("{}: {} has unknown value type {}", path_, what, t);
    GgufValue v = r.read_value(GgufType(t), what, 0);
    if (!kv_index_.emplace(key, kv_.size()).second) fail("{}: duplicate metadata key '{}'", path_, key);
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (!a->is_integer())
      fail("{}: general.alignment is {}, expected UINT32", path_, gguf_type_name(a->type()));
    uint64_t al = a->as_u64(path_ + ": general.alignment");
    if (al == 0 || (al & (al - 1)) != 0) fail("{}: general.alignment {} is not a power of two", path_, al);
    alignment_ = al;
  }

  tensors_.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo ti;
    ti.name = std::string(r.read_string(fmt::format("tensor #{} name", i)));
    const std::string what = fmt::format("tensor '{}'", ti.name);
    if (ti.name.size() > kMaxTensorName)
      fail("{}: {} has a {}-byte name, longer than ggml's {}-byte limit", path_, what, ti.name.size(), kMaxTensorName);
    uint32_t n_dims = r.read<uint32_t>(what + " n_dims");
    if (n_dims > kMaxDims) fail("{}: {} has {} dimensions, more than {}", path_, what, n_dims, kMaxDims);
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      int64_t ne = r.read<int64_t>(what + " dims");
      if (ne < 0) fail("{}: {} dimension {} is negative ({})", path_, what, d, ne);
      if (ne != 0 && numel > std::numeric_limits<int64_t>::max() / ne)
        fail("{}: {} has too many elements (dimensions overflow int64)", path_, what);
      numel *= ne;
      ti.dims.push_back(ne);
    }
    ti.type = r.read<uint32_t>(what + " type");
    ti.type_info = ggml_type_info(ti.type);
    if (!ti.type_info) fail("{}: {} has unknown ggml type {}", path_, what, ti.type);
    const int64_t bs = ti.type_info->block_size;
    if (ti.row_size() % bs != 0)
      fail("{}: {} of type {} has rows of {} elements, not a multiple of the block size {}", path_, what,
           ti.type_info->name, ti.row_size(), bs);
    const uint64_t blocks = uint64_t(numel / bs);
    if (blocks > std::numeric_limits<uint64_t>::max() / ti.type_info->type_size)
      fail("{}: {} byte size overflows", path_, what);
    ti.nbytes = blocks * ti.type_info->type_size;
    ti.offset = r.read<uint64_t>(what + " offset");
    if (ti.offset % alignment_ != 0)
      fail("{}: {} data offset {} is misaligned (not a multiple of the alignment {})", path_, what, ti.offset,
           alignment_);
    if (!tensor_index_.emplace(ti.name, tensors_.size()).second)
      fail("{}: duplicate tensor name '{}'", path_, ti.name);
    tensors_.push_back(std::move(ti));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t end_of_infos = r.pos();
  data_offset_ = end_of_infos + (alignment_ - end_of_infos % alignment_) % alignment_;
  if (!tensors_.empty()) {
    if (data_offset_ > size)
      fail("{}: data section would start at offset {}, past the end of the file ({} bytes): truncated?", path_,
           data_offset_, size);
    const uint64_t data_size = size - data_offset_;
    std::vector<const GgufTensorInfo*> by_offset;
    for (auto& ti : tensors_) {
      if (ti.offset > data_size || ti.nbytes > data_size - ti.offset)
        fail("{}: tensor '{}' data [{}, {}) runs past the end of the data section ({} bytes): truncated file?",
             path_, ti.name, ti.offset, ti.offset + ti.nbytes, data_size);
      ti.data = base + data_offset_ + ti.offset;
      by_offset.push_back(&ti);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const GgufTensorInfo* a = by_offset[i - 1];
      const GgufTensorInfo* b = by_offset[i];
      if (b->offset < a->offset + a->nbytes)
        fail("{}: tensor '{}' data at offset {} overlaps tensor '{}' [{}, {})", path_, b->name, b->offset,
             a->name, a->offset, a->offset + a->nbytes);
    }
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufValue& GgufFile::get(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) fail("{}: missing metadata key '{}'", path_, key);
  return *v;
}

#define MX_GGUF_GETTER(RET, NAME, CONV)                                                   \
  RET GgufFile::get_##NAME(std::string_view key) const {                                  \
    return RET(get(key).CONV(fmt::format("{}: metadata '{}'", path_, key)));            \
  }                                                                                       \
  RET GgufFile::get_##NAME##_or(std::string_view key, RET def) const {                     \
    const GgufValue* v = find(key);                                                       \
    return v ? RET(v->CONV(fmt::format("{}: metadata '{}'", path_, key))) : def;          \
  }

MX_GGUF_GETTER(uint64_t, u64, as_u64)
MX_GGUF_GETTER(uint32_t, u32, as_u32)
MX_GGUF_GETTER(int64_t, i64, as_i64)
MX_GGUF_GETTER(double, f64, as_f64)
MX_GGUF_GETTER(bool, bool, as_bool)
#undef MX_GGUF_GETTER

std::string GgufFile::get_string(std::string_view key) const {
  return std::string(get(key).as_string(fmt::format("{}: metadata '{}'", path_, key)));
}

std::string GgufFile::get_string_or(std::string_view key, std::string_view def) const {
  const GgufValue* v = find(key);
  return std::string(v ? v->as_string(fmt::format("{}: metadata '{}'", path_, key)) : def);
}

const GgufArray& GgufFile::get_array(std::string_view key) const {
  return get(key).as_array(fmt::format("{}: metadata '{}'", path_, key));
}

const std::vector<std::string_view>& GgufFile::get_string_array(std::string_view key) const {
  const GgufArray& a = get_array(key);
  if (a.elem_type != GgufType::STRING)
    fail("{}: metadata '{}' is an array of {}, expected an array of STRING", path_, key, gguf_type_name(a.elem_type));
  return a.strings;
}

std::vector<float> GgufFile::get_f32_array(std::string_view key) const {
  const GgufArray& a = get_array(key);
  if (a.elem_type != GgufType::FLOAT32 && a.elem_type != GgufType::FLOAT64)
    fail("{}: metadata '{}' is an array of {}, expected an array of FLOAT32", path_, key, gguf_type_name(a.elem_type));
  std::vector<float> out(size_t(a.count));
  for (uint64_t i = 0; i < a.count; ++i) out[i] = float(a.float_at(i));
  return out;
}

std::vector<int32_t> GgufFile::get_i32_array(std::string_view key) const {
  const GgufArray& a = get_array(key);
  if (!is_int_type(a.elem_type))
    fail("{}: metadata '{}' is an array of {}, expected an array of integers", path_, key, gguf_type_name(a.elem_type));
  std::vector<int32_t> out(size_t(a.count));
  for (uint64_t i = 0; i < a.count; ++i) {
    if (a.elem_type == GgufType::UINT64 && load_scalar_bits(a.data + i * 8, a.elem_type) > uint64_t(INT32_MAX))
      fail("{}: metadata '{}' element {} does not fit int32", path_, key, i);
    int64_t v = a.int_at(i);
    if (v < INT32_MIN || v > INT32_MAX) fail("{}: metadata '{}' element {} = {} does not fit int32", path_, key, i, v);
    out[i] = int32_t(v);
  }
  return out;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t) fail("{}: no tensor named '{}'", path_, name);
  return *t;
}

}  // namespace mx
