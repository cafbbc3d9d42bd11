// Bad JSON inputs: every JSON file read goes through one size-capped, depth-limited reader (sim/core/json_io.h), and
// error text shows values through bounded_dump. Expected values come from the inputs written here (their nesting,
// their byte offsets, their sizes) or from nlohmann's own dump of small values.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "sim/config/scenario.h"
#include "sim/core/error.h"
#include "sim/core/json_io.h"
#include "sim/cost/hardware_profile.h"
#include "sim/validate/validate.h"

namespace gs {
namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / ("gradsweep_json_io_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// The QA case: a hardware profile nested 100000 levels deep crashed the serializer building the "got ..." text.
TEST(JsonInputs, DeepHardwareProfileIsRefusedWithTheFileAndPlaceOfLevel65) {
  const int d = 100000;
  const std::string prefix = "{\"name\":";
  const std::string text = prefix + std::string(d, '[') + std::string(d, ']') + "}";
  const std::string file = temp_file("deephw.json", text);
  const std::string what = error_of([&] { load_hardware_profile(file); });
  // Level 1 is the outer object; level 65 is the 64th '[' after the prefix: byte prefix.size() + 63, column + 1.
  const std::string where = file + ":1:" + std::to_string(prefix.size() + 63 + 1) + ": JSON nested deeper than 64";
  EXPECT_NE(what.find(where), std::string::npos) << what;
}

TEST(JsonInputs, NestingOf64LevelsIsAcceptedAnd65Refused) {
  const std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_FALSE(json_limit_problem(ok).has_value());
  EXPECT_NO_THROW(parse_json_text(ok, "f.json"));
  const std::string deep = std::string(65, '[') + std::string(65, ']');
  auto problem = json_limit_problem(deep);
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(problem->byte, 64u);  // the 65th '['
  // Brackets inside strings do not count.
  EXPECT_FALSE(json_limit_problem("[\"" + std::string(1000, '[') + "\"]").has_value());
}

TEST(JsonInputs, FoldersDevicesAndOversizedFilesAreRefusedByName) {
  const std::string dir = std::filesystem::path(temp_file("x.json", "{}")).parent_path().string();
  EXPECT_EQ(error_of([&] { load_hardware_profile(dir); }), dir + ": is a folder, not a JSON file");
  EXPECT_EQ(error_of([&] { load_hardware_profile("/dev/zero"); }),
            "/dev/zero: is not a regular file (a device, pipe or socket); expected a JSON file");
  // 64 MiB + 1 byte (sparse: nothing is written) is refused before reading; 64 MiB = 67108864 bytes.
  const std::string big = temp_file("big.json", "");
  std::filesystem::resize_file(big, (64ull << 20) + 1);
  EXPECT_EQ(error_of([&] { read_json_file(big); }),
            big + ": larger than 67108864 bytes (64 MiB), the most gradsweep reads from a JSON file");
  const std::string scenario_error = error_of([] { load_scenario("/dev/zero"); });
  EXPECT_EQ(scenario_error, "/dev/zero: is not a regular file (a device, pipe or socket); expected a JSON file");
  EXPECT_EQ(error_of([&] { load_scenario(big); }),
            big + ": larger than 67108864 bytes (64 MiB), the most gradsweep reads from a JSON file");
  std::filesystem::remove(big);
}

TEST(JsonInputs, SyntaxErrorsNameFileLineAndColumn) {
  // "{\n  \"a\": }": the parser stops at the '}' on line 2, column 8.
  EXPECT_EQ(error_of([] { parse_json_text("{\n  \"a\": }", "p.json"); }).rfind("p.json:2:8: not valid JSON: ", 0),
            0u);
  const std::string file = temp_file("bad.json", "{\"name\": ");
  const std::string what = error_of([&] { load_hardware_profile(file); });
  EXPECT_EQ(what.rfind(file + ":1:", 0), 0u) << what;
  EXPECT_NE(what.find("not valid JSON"), std::string::npos) << what;
}

// The mistakes people make writing JSON by hand, each named in words with what JSON wants instead (the expected text is
// the documented wording of readable_syntax_error, json_io.h; the line:column is where the parser stopped).
TEST(JsonInputs, SyntaxErrorsSayWhatIsWrongInWords) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"hello", "p.json:1:1: not valid JSON: 'h' is not JSON where a value should be (strings and keys take double "
                "quotes; YAML and Python literals are not JSON)"},
      {"{\"a\": 1,}", "p.json:1:9: not valid JSON: unexpected '}' where a key should be; expected a key in double "
                      "quotes (a comma before '}' or ']' is not JSON)"},
      {"[1, 2,]", "p.json:1:7: not valid JSON: unexpected ']' where a value should be; expected a value: {...}, [...], "
                  "a \"string\", a number, true, false or null (a comma before '}' or ']' is not JSON)"},
      {"{\"a\" 1}", "p.json:1:6: not valid JSON: unexpected number literal between a key and its value; expected ':'"},
      {"{\"a\": 1", "p.json:1:8: not valid JSON: the text ends inside an object; expected ',' or '}'"},
      {"{\"a\": 1 \"b\": 2}", "p.json:1:11: not valid JSON: unexpected string literal inside an object; expected ',' or "
                            "'}'"},
      {"[1 2]", "p.json:1:4: not valid JSON: unexpected number literal inside an array; expected ',' or ']'"},
      {"{'a': 1}", "p.json:1:2: not valid JSON: a single quote where a key should be; expected a key in double quotes "
                   "(strings and keys take double quotes in JSON)"},
      {"// note\n{}", "p.json:1:1: not valid JSON: '/' is not JSON where a value should be (comments are not JSON)"},
      {"{\"a\": NaN}", "p.json:1:7: not valid JSON: 'N' is not JSON where a value should be (strings and keys take "
                       "double quotes; YAML and Python literals are not JSON)"},
      {"{\"a\": 1} x", "p.json:1:10: not valid JSON: more text after the JSON value ends (a file holds one JSON value)"},
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(error_of([&] { parse_json_text(text, "p.json"); }), want) << text;
  // A message of another shape passes unchanged.
  EXPECT_EQ(readable_syntax_error("number overflow parsing '1e400'"), "number overflow parsing '1e400'");
}

TEST(JsonInputs, BoundedDumpCutsLongAndDeepValuesAndKeepsShortOnes) {
  const json small = json::parse(R"({"a":[1,2.5,"x\"y"],"b":null,"c":{"d":true}})");
  EXPECT_EQ(bounded_dump(small, 200), small.dump());  // nlohmann's own text when it fits
  EXPECT_EQ(bounded_dump(small, small.dump().size()), small.dump());
  EXPECT_EQ(bounded_dump(small, 10), small.dump().substr(0, 7) + "...");
  // 100000 levels: only the first 57 brackets are walked.
  json deep = json::array();
  for (int i = 0; i < 100000; ++i) deep = json::array({std::move(deep)});
  EXPECT_EQ(bounded_dump(deep, 60), std::string(57, '[') + "...");
  const json long_string = std::string(1 << 20, 'a');
  EXPECT_EQ(bounded_dump(long_string, 60), "\"" + std::string(56, 'a') + "...");
  json wide = json::array();
  for (int i = 0; i < 100000; ++i) wide.push_back(7);
  EXPECT_EQ(bounded_dump(wide, 12), "[7,7,7,7,...");
}

// Error text of a hardware profile field shows a deep (but within 64 levels) value cut to 80 characters.
TEST(JsonInputs, ProfileProblemsShowValuesCut) {
  const std::string text = "{\"gpus_per_node\":" + std::string(60, '[') + std::string(60, ']') + "}";
  const std::string what = error_of([&] { load_hardware_profile(temp_file("wide.json", text)); });
  EXPECT_NE(what.find("gpus_per_node: expected"), std::string::npos) << what;
  EXPECT_NE(what.find("got " + std::string(60, '[') + std::string(17, ']') + "..."), std::string::npos) << what;
}

}  // namespace
}  // namespace gs
