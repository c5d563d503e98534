#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/safetensors.h"
#include "test_util.h"

using namespace mx;
using nlohmann::json;

namespace {

// Raw file from a header JSON string and a data section.
std::string raw_file(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  std::string s(reinterpret_cast<const char*>(&n), 8);
  return s + header + data;
}

// Expects loading `bytes` to fail with a message containing every fragment.
void expect_error(const std::string& bytes, std::initializer_list<const char*> fragments) {
  mxtest::TempDir d;
  std::string p = d / "m.safetensors";
  mxtest::spit(p, bytes);
  try {
    TensorStore s = load_safetensors(p);
    ADD_FAILURE() << "no error for malformed file";
  } catch (const Error& e) {
    for (const char* f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos)
        << "message '" << e.what() << "' lacks '" << f << "'";
  }
}

std::string f32s(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

}  // namespace

TEST(Safetensors, RoundTripKeepsNamesDtypesShapesAndBytes) {
  mxtest::TempDir d;
  OwnedTensor a = OwnedTensor::make(DType::F32, {2, 3});
  OwnedTensor b = OwnedTensor::make(DType::BF16, {5});
  OwnedTensor c = OwnedTensor::make(DType::I8, {1, 1, 7});
  for (int i = 0; i < 6; ++i) a.t.as<float>()[i] = float(i) * 1.5f;
  for (int i = 0; i < 5; ++i) b.t.as<uint16_t>()[i] = f32_to_bf16(float(i) - 2);
  for (int i = 0; i < 7; ++i) c.t.as<int8_t>()[i] = int8_t(-i);
  write_safetensors(d / "x.safetensors", {{"a", a.t}, {"layer.b", b.t}, {"c", c.t}}, {{"format", "pt"}});
  TensorStore s = load_safetensors(d / "x.safetensors");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s.metadata.at("format"), "pt");
  const Tensor& ra = s.get("a");
  EXPECT_EQ(ra.dtype, DType::F32);
  EXPECT_EQ(ra.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(ra.data, a.t.data, a.t.nbytes()), 0);
  EXPECT_EQ(s.get("layer.b").dtype, DType::BF16);
  EXPECT_EQ(std::memcmp(s.get("layer.b").data, b.t.data, b.t.nbytes()), 0);
  EXPECT_EQ(s.get("c").dims(), (std::vector<int64_t>{1, 1, 7}));
  EXPECT_EQ(s.get("c").as<int8_t>()[6], -6);
}

TEST(Safetensors, ShardedWithIndexRoundTrip) {
  mxtest::TempDir d;
  std::vector<OwnedTensor> ts;
  std::vector<NamedTensor> list;
  for (int i = 0; i < 6; ++i) {
    ts.push_back(OwnedTensor::make(DType::F32, {256}));
    for (int j = 0; j < 256; ++j) ts.back().t.as<float>()[j] = float(i * 1000 + j);
  }
  for (int i = 0; i < 6; ++i) list.push_back({"t" + std::to_string(i), ts[i].t});
  write_safetensors_sharded(d.path().string(), list, 2048);  // 2 tensors per shard
  EXPECT_TRUE(mxtest::fs::exists(d / "model.safetensors.index.json"));
  EXPECT_TRUE(mxtest::fs::exists(d / "model-00003-of-00003.safetensors"));
  TensorStore s = load_safetensors(d.path().string());
  ASSERT_EQ(s.size(), 6u);
  EXPECT_EQ(s.get("t5").as<float>()[255], 5255.0f);
  EXPECT_NE(s.origin("t5").find("model-00003-of-00003"), std::string::npos);
}

TEST(Safetensors, IndexThatDisagreesWithShardsIsAnError) {
  mxtest::TempDir d;
  OwnedTensor a = OwnedTensor::make(DType::F32, {4});
  write_safetensors(d / "model-00001-of-00001.safetensors", {{"real", a.t}});
  json idx = {{"weight_map", {{"listed", "model-00001-of-00001.safetensors"}}}};
  mxtest::spit(d / "model.safetensors.index.json", idx.dump());
  try {
    load_safetensors(d.path().string());
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'listed'"), std::string::npos) << m;
    EXPECT_NE(m.find("'real'"), std::string::npos) << m;
  }
  json bad = {{"weight_map", {{"real", "missing.safetensors"}}}};
  mxtest::spit(d / "model.safetensors.index.json", bad.dump());
  EXPECT_THROW(load_safetensors(d.path().string()), Error);
}

TEST(Safetensors, MalformedFilesGiveErrorsNamingTheProblem) {
  const std::string ok_hdr = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data = f32s({1, 2});
  // Sanity: the well-formed file loads.
  {
    mxtest::TempDir d;
    mxtest::spit(d / "m.safetensors", raw_file(ok_hdr, data));
    EXPECT_NO_THROW(load_safetensors(d / "m.safetensors"));
  }
  expect_error("abc", {"too short"});
  expect_error(raw_file(ok_hdr, data).substr(0, 20), {"header length", "truncated"});
  expect_error(raw_file(ok_hdr, data).substr(0, 8 + ok_hdr.size() + 4), {"'w'", "past the data section"});
  expect_error(raw_file("{\"w\": [1,", "xxxxxxxx"), {"not valid JSON"});
  expect_error(raw_file("[1,2]   ", ""), {"JSON object"});
  std::string huge(8, '\xff');
  expect_error(huge + "{}", {"exceeds"});
  expect_error(raw_file(R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", data),
               {"'w'", "unsupported dtype 'F33'"});
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data),
               {"'w'", "12 bytes", "span 8"});
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data),
               {"'w'", "non-negative"});
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data),
               {"'w'", "reversed"});
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[2]}})", data), {"'w'", "data_offsets"});
  expect_error(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                        data),
               {"overlaps"});
  expect_error(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data),
               {"hole", "'a'"});
  expect_error(raw_file(ok_hdr, data + "junk"), {"trailing"});
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                        data),
               {"'w'", "overflow"});
  expect_error(raw_file(R"({"__metadata__":{"k":1}})", ""), {"__metadata__"});
}

TEST(Safetensors, MissingPathsAreClearErrors) {
  EXPECT_THROW(load_safetensors("/nonexistent/model"), Error);
  mxtest::TempDir d;
  try {
    load_safetensors(d.path().string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no .safetensors"), std::string::npos);
  }
}
