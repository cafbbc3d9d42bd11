// The tensor files exchanged with PyTorch (sim/model/tensor_file.h) and model.init.from: the readers against bytes
// built here by hand from the documented formats and against files NumPy and PyTorch wrote
// (tests/data/interop/make_files.py), every error path, the writers' exact bytes, and a model initialized from a
// file. Expected values come from the formats' specifications and the generator's formulas, not from the readers.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <zlib.h>

#include "sim/config/scenario.h"
#include "sim/model/model.h"
#include "sim/model/tensor_file.h"
#include "sim/validate/validate.h"

namespace gs {
namespace {

const std::string kData = std::string(GRADSWEEP_SOURCE_DIR) + "/tests/data/interop/";

std::string u64le(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}
std::string u32le(uint32_t v) { return u64le(v).substr(0, 4); }
std::string u16le(uint16_t v) { return u64le(v).substr(0, 2); }

// A safetensors file: the 8-byte length, the header text as given, the buffer.
std::string safetensors(const std::string& header, const std::string& buffer) {
  return u64le(header.size()) + header + buffer;
}

// The IEEE 754 bits of the values used below (binary32: 1.5 = 0x3FC00000, -2 = 0xC0000000).
const std::string kTwoFloats = u32le(0x3FC00000u) + u32le(0xC0000000u);

std::string error_of(const std::string& bytes) {
  try {
    parse_safetensors(bytes, "f.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, ReadsHandBuiltBytesOfEveryConvertedDtype) {
  // F32 [2] = {1.5, -2}; F16 [1, 2] = {0x3C00 = 1, 0xC000 = -2}; BF16 [1] = 0x3F80 = 1; F64 [1] = 0.1 (bits
  // 0x3FB999999999999A) read as the nearest float32 0.1f. Listed out of offset order: the reader sorts by offset.
  const std::string header =
      R"({"h":{"dtype":"F16","shape":[1,2],"data_offsets":[8,12]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("z":{"dtype":"BF16","shape":[1],"data_offsets":[12,14]},"d":{"dtype":"F64","shape":[],"data_offsets":[14,22]},)"
      R"("__metadata__":{"format":"pt"}}  )";
  const std::string buffer = kTwoFloats + u16le(0x3C00) + u16le(0xC000) + u16le(0x3F80) + u64le(0x3FB999999999999Aull);
  const TensorFile f = parse_safetensors(safetensors(header, buffer), "f");
  ASSERT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(f.tensors[0].name, "a");
  EXPECT_EQ(f.tensors[0].values, (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(f.tensors[1].name, "h");
  EXPECT_EQ(f.tensors[1].shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(f.tensors[1].values, (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(f.tensors[2].values, (std::vector<float>{1.0f}));
  EXPECT_EQ(f.tensors[3].shape, std::vector<int64_t>{});  // a scalar: shape [], one element
  EXPECT_EQ(f.tensors[3].values, (std::vector<float>{0.1f}));
  EXPECT_EQ(f.metadata.at("format"), "pt");
}

TEST(Safetensors, EveryErrorNamesTheFileAndWhat) {
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  auto has = [](const std::string& what, const std::string& part) {
    return what.find("f.safetensors") != std::string::npos && what.find(part) != std::string::npos;
  };
  EXPECT_PRED2(has, error_of("1234567"), "truncated: 7 bytes");
  EXPECT_PRED2(has, error_of(u64le(100) + "{}"), "truncated: the header length is 100 bytes, the file holds 2");
  EXPECT_PRED2(has, error_of(u64le(200000000) + "{}"), "more than the format's limit");
  EXPECT_PRED2(has, error_of(safetensors("{\"a\": [1,", "")), "not valid JSON");
  EXPECT_PRED2(has, error_of(safetensors("[1, 2]", "")), "does not start with '{'");
  EXPECT_PRED2(has, error_of(safetensors("{" + ok_entry + "," + ok_entry + "}", kTwoFloats)), "\"a\" twice");
  EXPECT_PRED2(has, error_of(safetensors(R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", kTwoFloats)),
               "tensor \"a\": dtype I32 is not read");
  EXPECT_PRED2(has, error_of(safetensors(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", kTwoFloats)),
               "hold 8 bytes, shape [3] of F32 needs 12");
  EXPECT_PRED2(has, error_of(safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abc")),
               "run past the buffer's 3 bytes");
  EXPECT_PRED2(has, error_of(safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", kTwoFloats)),
               "a hole before it");
  EXPECT_PRED2(has, error_of(safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", kTwoFloats)),
               "overlaps");
  EXPECT_PRED2(has, error_of(safetensors("{" + ok_entry + "}", kTwoFloats + "xx")), "the tensors index 8 bytes");
  EXPECT_PRED2(has, error_of(safetensors(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", kTwoFloats)),
               "integers >= 0");
  EXPECT_PRED2(has, error_of(safetensors(R"({"a":{"dtype":"F32","shape":[2]}})", kTwoFloats)), "data_offsets");
  EXPECT_PRED2(has, error_of(safetensors(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", kTwoFloats)), "dtype");
}

TEST(Safetensors, WriterBytesAreTheDocumentedLayout) {
  const float w[3] = {1.5f, -2.0f, 0.0f};
  const std::string bytes = safetensors_bytes({{"0.weight", {1, 3}, w}}, {{"format", "pt"}});
  // The header JSON in table order, padded with spaces to a multiple of 8, then the float32 bits.
  std::string header = R"({"__metadata__":{"format":"pt"},"0.weight":{"dtype":"F32","shape":[1,3],"data_offsets":[0,12]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  EXPECT_EQ(bytes, u64le(header.size()) + header + kTwoFloats + u32le(0));
  const TensorFile back = parse_safetensors(bytes, "round trip");
  ASSERT_EQ(back.tensors.size(), 1u);
  EXPECT_EQ(back.tensors[0].values, (std::vector<float>{1.5f, -2.0f, 0.0f}));
}

// The values of tests/data/interop/make_files.py.
void expect_generated(const TensorFile& f, bool has_bf16) {
  std::map<std::string, const FileTensor*> by;
  for (const auto& t : f.tensors) by[t.name] = &t;
  ASSERT_EQ(f.tensors.size(), has_bf16 ? 5u : 4u);
  ASSERT_TRUE(by.count("w") && by.count("b") && by.count("d") && by.count("h"));
  EXPECT_EQ(by["w"]->shape, (std::vector<int64_t>{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(by["w"]->values[static_cast<size_t>(i)], (static_cast<float>(i) - 2.5f) * 0.25f);
  EXPECT_EQ(by["b"]->values, (std::vector<float>{1e-3f, -7.0f}));
  EXPECT_EQ(by["d"]->values, (std::vector<float>{0.1f, static_cast<float>(1.0 / 3.0)}));
  EXPECT_EQ(by["h"]->values, (std::vector<float>{0.5f, -65504.0f}));
  if (has_bf16) {
    EXPECT_EQ(by["bf"]->values, (std::vector<float>{1.0f, -0.5f, 3.140625f}));
  }
}

TEST(TensorFiles, ReadsWhatNumpyAndTorchWrote) {
  expect_generated(read_tensor_file(kData + "numpy_stored.npz"), false);
  expect_generated(read_tensor_file(kData + "numpy_deflated.npz"), false);
  expect_generated(read_tensor_file(kData + "torch.safetensors"), true);
  EXPECT_EQ(read_tensor_file(kData + "torch.safetensors").metadata.at("format"), "pt");
}

std::string npz_error(const std::string& bytes) {
  try {
    parse_npz(bytes, "f.npz");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A one-entry stored zip of `npy` named `name` (APPNOTE.TXT local header, central directory, end record).
std::string zip_of(const std::string& name, const std::string& npy, uint32_t crc_xor = 0) {
  const auto crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(npy.data()), static_cast<uInt>(npy.size()))) ^ crc_xor;
  const std::string sizes = u32le(crc) + u32le(static_cast<uint32_t>(npy.size())) + u32le(static_cast<uint32_t>(npy.size()));
  std::string z = u32le(0x04034b50) + u16le(20) + u16le(0) + u16le(0) + u32le(0) + sizes + u16le(static_cast<uint16_t>(name.size())) +
                  u16le(0) + name + npy;
  const std::string dir = u32le(0x02014b50) + u16le(20) + u16le(20) + u16le(0) + u16le(0) + u32le(0) + sizes +
                          u16le(static_cast<uint16_t>(name.size())) + u16le(0) + u16le(0) + u16le(0) + u16le(0) +
                          u32le(0) + u32le(0) + name;
  return z + dir + u32le(0x06054b50) + u16le(0) + u16le(0) + u16le(1) + u16le(1) + u32le(static_cast<uint32_t>(dir.size())) +
         u32le(static_cast<uint32_t>(z.size())) + u16le(0);
}

// A .npy 1.0 array with the given dict text and data.
std::string npy_of(const std::string& dict, const std::string& data) {
  std::string h = dict;
  h.append(63 - (10 + h.size()) % 64, ' ');
  h += '\n';
  return std::string("\x93NUMPY\x01\x00", 8) + u16le(static_cast<uint16_t>(h.size())) + h + data;
}

TEST(Npz, HandBuiltArchiveAndEveryErrorPath) {
  const std::string f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const TensorFile ok = parse_npz(zip_of("0.bias.npy", npy_of(f4, kTwoFloats)), "f.npz");
  ASSERT_EQ(ok.tensors.size(), 1u);
  EXPECT_EQ(ok.tensors[0].name, "0.bias");
  EXPECT_EQ(ok.tensors[0].values, (std::vector<float>{1.5f, -2.0f}));
  auto has = [](const std::string& what, const std::string& part) {
    return what.find("f.npz") != std::string::npos && what.find(part) != std::string::npos;
  };
  EXPECT_PRED2(has, npz_error("PK\x03\x04 and nothing else"), "no end-of-central-directory record");
  const std::string whole = zip_of("a.npy", npy_of(f4, kTwoFloats));
  EXPECT_PRED2(has, npz_error(whole.substr(0, 40) + whole.substr(whole.size() - 22)), "entry");  // data cut out
  EXPECT_PRED2(has, npz_error(zip_of("a.npy", npy_of(f4, kTwoFloats), 1)), "CRC-32 mismatch");
  EXPECT_PRED2(has, npz_error(zip_of("a.txt", "hello")), "not a .npy entry");
  EXPECT_PRED2(has, npz_error(zip_of("a.npy", "NUMPY")), "bad magic");
  EXPECT_PRED2(has, npz_error(zip_of("a.npy", npy_of("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
                                                     kTwoFloats))), "dtype '<i4' is not read");
  EXPECT_PRED2(has, npz_error(zip_of("a.npy", npy_of("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }",
                                                     kTwoFloats))), "fortran_order True");
  EXPECT_PRED2(has, npz_error(zip_of("a.npy", npy_of("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
                                                     kTwoFloats))), "8 data bytes, shape (3,) of '<f4' needs 12");
  EXPECT_PRED2(has, npz_error(zip_of("a.npy", npy_of("{'descr': '<f4', 'shape': (2,), }", kTwoFloats))), "lacks");
  // A deflated entry whose data is not deflate (the method field set to 8 on stored bytes).
  std::string bad = whole;
  bad[8] = 8;                                            // the local header's method
  bad[bad.find(std::string("PK\x01\x02", 4)) + 10] = 8;  // the central directory's
  EXPECT_PRED2(has, npz_error(bad), "corrupt");
}

TEST(Npz, WriterIsNumpysLayout) {
  const int32_t v[6] = {0, 1, 2, 3, 4, -5};
  const std::string z = npz_bytes({{"indices", {2, 3}, v}});
  // numpy.lib.format 1.0: magic, version, header length, the dict padded so that the data starts at a multiple of 64.
  const std::string dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }";
  const size_t at = z.find(dict);
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(z.substr(at - 10, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len = static_cast<unsigned char>(z[at - 2]) | (static_cast<unsigned char>(z[at - 1]) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  EXPECT_EQ(z[at + header_len - 1], '\n');
  EXPECT_EQ(z.compare(0, 4, "PK\x03\x04"), 0);
  EXPECT_EQ(z.substr(30, 11), "indices.npy");
  EXPECT_EQ(z.substr(at + header_len, 24), u32le(0) + u32le(1) + u32le(2) + u32le(3) + u32le(4) + u32le(static_cast<uint32_t>(-5)));
  EXPECT_EQ(z.substr(z.size() - 22, 4), u32le(0x06054b50));
}

// A temporary folder removed at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/gs_tensor_file_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path + "/" + name, std::ios::binary) << bytes;
    return path + "/" + name;
  }
};

RunConfig mlp_config(const std::string& init_from) {
  RunConfig c;
  c.model.kind = "mlp";
  c.model.layers = {3, 2, 2};
  c.model.loss = "mse";
  c.model.init_from = init_from;
  return c;
}

std::string init_error(const RunConfig& c) {
  try {
    make_model(c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// mlp [3, 2, 2] is torch's nn.Sequential(Linear(3, 2), ReLU(), Linear(2, 2)): state_dict 0.weight [2, 3], 0.bias [2],
// 2.weight [2, 2], 2.bias [2]; gradsweep's flat buffer holds them layer by layer, weight then bias.
const std::vector<float> kW0 = {1, 2, 3, 4, 5, 6}, kB0 = {7, 8}, kW2 = {9, 10, 11, 12}, kB2 = {13, 14};

TEST(InitFromFile, CopiesEveryTensorByItsTorchNameWhateverTheFileOrder) {
  TempDir d;
  const std::string file = d.write("w.safetensors", safetensors_bytes({{"2.bias", {2}, kB2.data()},
                                                                       {"0.weight", {2, 3}, kW0.data()},
                                                                       {"0.bias", {2}, kB0.data()},
                                                                       {"2.weight", {2, 2}, kW2.data()}}));
  const auto m = make_model(mlp_config(file));
  std::vector<float> p(m->num_params(), -1.0f);
  m->init_params(p.data(), 7);
  std::vector<float> want;
  for (float v = 1; v <= 14; ++v) want.push_back(v);
  EXPECT_EQ(p, want);
  // linear [3, 2] is nn.Sequential(Linear(3, 2)): 0.weight, 0.bias; the quadratic model's one tensor is w.
  RunConfig lin = mlp_config(d.write("l.safetensors", safetensors_bytes({{"0.weight", {2, 3}, kW0.data()},
                                                                         {"0.bias", {2}, kB0.data()}})));
  lin.model.kind = "linear";
  lin.model.layers = {3, 2};
  const auto l = make_model(lin);
  std::vector<float> lp(l->num_params());
  l->init_params(lp.data(), 1);
  EXPECT_EQ(lp, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(InitFromFile, RefusesEveryMismatchNamingTheTensorAndBothShapes) {
  TempDir d;
  const std::vector<float> nan2 = {1.0f, std::nanf("")};
  auto file_with = [&](std::vector<OutTensor> t) { return d.write("bad.safetensors", safetensors_bytes(t)); };
  std::string e = init_error(mlp_config(file_with({{"0.weight", {3, 2}, kW0.data()}, {"0.bias", {2}, kB0.data()},
                                                   {"2.weight", {2, 2}, kW2.data()}, {"2.bias", {2}, kB2.data()}})));
  EXPECT_NE(e.find("model.init.from: " + d.path + "/bad.safetensors: "), std::string::npos) << e;
  EXPECT_NE(e.find("tensor \"0.weight\" has shape [3, 2] in the file, the model's is [2, 3]"), std::string::npos) << e;
  e = init_error(mlp_config(file_with({{"0.weight", {2, 3}, kW0.data()}, {"0.bias", {2}, kB0.data()},
                                       {"2.weight", {2, 2}, kW2.data()}})));
  EXPECT_NE(e.find("tensor \"2.bias\" (shape [2]) is missing"), std::string::npos) << e;
  EXPECT_NE(e.find("the model's tensors are 0.weight [2, 3], 0.bias [2], 2.weight [2, 2], 2.bias [2]"),
            std::string::npos) << e;
  e = init_error(mlp_config(file_with({{"0.weight", {2, 3}, kW0.data()}, {"0.bias", {2}, kB0.data()},
                                       {"2.weight", {2, 2}, kW2.data()}, {"2.bias", {2}, kB2.data()},
                                       {"4.weight", {1}, kB2.data()}})));
  EXPECT_NE(e.find("tensor \"4.weight\" (shape [1]) is not a parameter of the model"), std::string::npos) << e;
  e = init_error(mlp_config(file_with({{"0.weight", {2, 3}, kW0.data()}, {"0.bias", {2}, nan2.data()},
                                       {"2.weight", {2, 2}, kW2.data()}, {"2.bias", {2}, kB2.data()}})));
  EXPECT_NE(e.find("tensor \"0.bias\" element 1 is NaN"), std::string::npos) << e;
  e = init_error(mlp_config(d.path + "/missing.safetensors"));
  EXPECT_NE(e.find("model.init.from: " + d.path + "/missing.safetensors: cannot open"), std::string::npos) << e;
}

TEST(InitFromFile, AShapePresetIsRefusedOnceWithoutReadingTheFile) {
  // GPT-2 small has about 150 tensors; matching a file against them listed every one (about 4,900 characters). The
  // refusal names the field, the file and what is expected, and does not read the file (it need not exist).
  TempDir d;
  RunConfig c = mlp_config(d.path + "/w.safetensors");
  c.model.kind = "gpt2-small";
  c.training.mode = "timing";
  const std::string e = init_error(c);
  EXPECT_EQ(e, "model.init.from: " + d.path + "/w.safetensors: expected a model with parameters (mlp, linear, "
               "quadratic); a shape preset has none to load");
}

TEST(InitFromFile, ScenarioPathsResolveFromItsFolderAndProblemsAreConfigIssues) {
  TempDir d;
  d.write("w.safetensors", safetensors_bytes({{"0.weight", {2, 3}, kW0.data()}, {"0.bias", {2}, kB0.data()},
                                              {"2.weight", {2, 2}, kW2.data()}, {"2.bias", {2}, kB2.data()}}));
  d.write("short.safetensors", safetensors_bytes({{"0.weight", {2, 3}, kW0.data()}}));
  const std::string base = R"("data": {"kind": "teacher", "teacher": {"in_dim": 3, "out_dim": 2, "task": "regression",
      "train_samples": 256, "eval_samples": 16}}, "training": {"steps": 2}, "name": "x",)";
  const std::string good = d.write("good.json", "{" + base + R"( "model": {"kind": "mlp", "layers": [3, 2, 2],
      "loss": "mse", "init": {"from": "w.safetensors"}}})");
  const Scenario s = load_scenario(good);
  ASSERT_EQ(s.runs.size(), 1u);
  EXPECT_EQ(s.runs[0].config.model.init_from, d.path + "/w.safetensors");
  const std::string bad = d.write("bad.json", "{" + base + R"( "model": {"kind": "mlp", "layers": [3, 2, 2],
      "loss": "mse", "init": {"from": "short.safetensors"}}})");
  try {
    load_scenario(bad);
    ADD_FAILURE() << "a file without the model's tensors was accepted";
  } catch (const ScenarioError& e) {
    ASSERT_FALSE(e.issues().empty());
    EXPECT_EQ(e.issues()[0].path, "model.init.from") << e.what();
    EXPECT_NE(e.issues()[0].message.find(d.path + "/short.safetensors: tensor \"0.bias\" (shape [2]) is missing"),
              std::string::npos) << e.what();
  }
  // A shape preset has no parameters to load.
  try {
    parse_scenario(R"({"name": "p", "model": {"kind": "gpt2-small", "init": {"from": "w.safetensors"}},
                       "training": {"mode": "timing"}, "data": {"kind": "none"}})", "<t>");
    ADD_FAILURE() << "model.init.from was accepted for a shape preset";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("model.init.from: only applies when model.kind is \"mlp\", \"linear\" or "
                                         "\"quadratic\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gs
