// core/safetensors.hpp: round trips, the byte layout of the format, and every malformed file
// class rejected with a message naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/safetensors.hpp"
#include "test_dir.hpp"

namespace tandem {
namespace {

Safetensors sample() {
  Safetensors st;
  st.metadata["format"] = "pt";
  st.put("a", Tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6}));
  st.put("b", Tensor<double>({1}, {0.5}));
  st.put("ids", Tensor<int64_t>({2}, {-1, 99091}));
  st.put("empty", Tensor<float>({0, 4}));
  return st;
}

// A file built by hand from the format's definition (not by our writer).
std::string hand_made(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

void expect_bad(const std::string& bytes, const char* part) {
  try {
    parse_safetensors(bytes, "f.safetensors");
    FAIL() << "accepted";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("f.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Safetensors, RoundTrip) {
  const Safetensors st = sample();
  const Safetensors back = parse_safetensors(serialize_safetensors(st), "mem");
  EXPECT_EQ(back.metadata.at("format"), "pt");
  const auto a = back.get_as<float>("a", "mem");
  EXPECT_EQ(a.shape, (Shape{2, 3}));
  EXPECT_EQ(a.data[5], 6.0f);
  EXPECT_EQ(back.get_as<int64_t>("ids", "mem").data[0], -1);
  EXPECT_EQ(back.get_as<float>("empty", "mem").size(), 0);
  EXPECT_THROW(back.get_as<double>("a", "mem"), BadInput);  // wrong dtype
  EXPECT_THROW(back.get("zzz", "mem"), BadInput);
}

TEST(Safetensors, ReadsTheFormatAsSpecified) {
  std::string data(8, '\0');
  const float v[2] = {1.5f, -2.0f};
  std::memcpy(data.data(), v, 8);
  const auto st = parse_safetensors(
      hand_made(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data), "f");
  EXPECT_EQ(st.get_as<float>("x", "f").data[1], -2.0f);
}

TEST(Safetensors, RejectsMalformedFiles) {
  const std::string x8(8, 'x');
  expect_bad("abc", "truncated");
  expect_bad(hand_made("{}", "").substr(0, 9), "header length");
  expect_bad(hand_made("{not json", ""), "invalid JSON");
  expect_bad(hand_made("[1,2]", ""), "object");
  expect_bad(hand_made(R"({"x":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", x8), "dtype");
  expect_bad(hand_made(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", x8),
             "data_offsets");
  expect_bad(hand_made(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", x8),
             "needs 12");
  expect_bad(hand_made(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", x8), "hole");
  expect_bad(
      hand_made(
          R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          x8),
      "overlap");
  expect_bad(hand_made(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", x8),
             "trailing");
  expect_bad(hand_made(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", x8), "shape");
  expect_bad(hand_made(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})", x8),
             "unknown");
  expect_bad(hand_made(R"({"__metadata__":{"k":1}})", ""), "__metadata__");
  // Missing fields (found by safetensors_fuzz: json::at threw out_of_range past BadInput).
  expect_bad(hand_made(R"({"x":{"dtype":"F32","shape":[2]}})", x8), "'x.data_offsets': missing");
  expect_bad(hand_made(R"({"x":{"dtype":"F32","data_offsets":[0,8]}})", x8), "'x.shape': missing");
  expect_bad(hand_made(R"({"x":{"shape":[2],"data_offsets":[0,8]}})", x8), "'x.dtype': missing");
}

TEST(Safetensors, TruncatedFileOnDiskIsRejectedAndWritesAreAtomic) {
  const TestDir tmp;
  const auto& dir = tmp.path();
  const auto path = dir / "s.safetensors";
  write_safetensors(path, sample());
  const std::string bytes = read_file(path);
  write_file_atomic(path, std::string_view(bytes.substr(0, bytes.size() - 3)));
  EXPECT_THROW(read_safetensors(path), BadInput);
  EXPECT_THROW(write_safetensors(dir / "missing_dir" / "s.safetensors", sample()), BadInput);
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find("tmp"), std::string::npos)
        << "left behind: " << e.path();
}

// A shard's tensor read on demand stays inside the tensor: a range past its end is bad input
// naming the file, never the next tensor's bytes (nor an offset + count that wraps).
TEST(Safetensors, OnDemandReadsStayInsideTheTensor) {
  const TestDir tmp;
  const auto path = tmp.path() / "s.safetensors";
  write_safetensors(path, sample());
  const SafetensorsFile f(path);
  const StEntry& a = f.header().tensors.at("a");  // [2, 3] floats 1..6, followed by "b"
  ASSERT_EQ(a.end - a.begin, 24u);
  const std::string last = f.read(a, 20, 4);
  float v = 0;
  std::memcpy(&v, last.data(), 4);
  EXPECT_EQ(v, 6.0f);
  EXPECT_EQ(f.read(a, 24, 0), "");
  for (const auto& [offset, count] :
       {std::pair<uint64_t, uint64_t>{4, 24}, {20, 8}, {25, 0}, {8, UINT64_MAX - 4}}) {
    try {
      f.read(a, offset, count);
      ADD_FAILURE() << "bytes [" << offset << ", +" << count << ") of a 24-byte tensor were read";
    } catch (const BadInput& e) {
      EXPECT_NE(std::string(e.what()).find("s.safetensors"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("of a 24-byte tensor"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tandem
