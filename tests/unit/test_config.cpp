// Scenario loading and validation: every kind of bad input is refused with its path and what was expected, all
// problems at once; sweep expansion (axes, zip, repeats, overrides); stable run ids.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "sim/config/scenario.h"
#include "sim/cost/cost_model.h"
#include "sim/cost/hardware_profile.h"
#include "sim/validate/validate.h"
#include "sim/runtime/run_plan.h"

namespace gs {
namespace {

// The issues of a scenario that must fail to load.
std::vector<ConfigIssue> issues_of(const std::string& text, const std::vector<std::string>& sets = {}) {
  try {
    parse_scenario(text, "bad.json", sets);
  } catch (const ScenarioError& e) {
    return e.issues();
  }
  ADD_FAILURE() << "scenario was accepted: " << text;
  return {};
}

bool has_issue(const std::vector<ConfigIssue>& issues, const std::string& path, const std::string& fragment) {
  for (const auto& i : issues)
    if (i.path == path && i.message.find(fragment) != std::string::npos) return true;
  return false;
}

std::string dump_issues(const std::vector<ConfigIssue>& issues) {
  std::string s;
  for (const auto& i : issues) s += i.path + ": " + i.message + "\n";
  return s;
}

const char* kGood = R"({"name": "t", "model": {"kind": "mlp", "layers": [8, 4, 3]},
  "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "training": {"steps": 3}})";

// Number fields the arithmetic holds as float32 refuse a value that would become inf there (or 0, for a field that
// must be > 0), with the field's path; the same value as a double would pass the field's own range. Initial weights
// of the linear and quadratic models too.
TEST(ConfigErrors, NumbersPastFloat32RangeAreRefusedWithTheirPath) {
  auto is = issues_of(kGood, {"training.optimizer.lr=1e39", "training.optimizer.weight_decay=5e38",
                              "training.optimizer.kind=adam", "training.optimizer.eps=1e-50",
                              "precision.growth_factor=1e39", "training.clip_grad_norm=1e300"});
  EXPECT_TRUE(has_issue(is, "training.optimizer.lr", "that fits float32 (1e+39 is outside float32's range"))
      << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "training.optimizer.weight_decay", "would become inf as a float32")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "training.optimizer.eps", "1e-50 rounds to 0 as a float32")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "precision.growth_factor", "outside float32's range")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "training.clip_grad_norm", "outside float32's range")) << dump_issues(is);
  // 1e-50 is allowed where 0 is (clipping's max norm must be > 0 only when on: 0 means off, so no nonzero rule).
  EXPECT_NO_THROW(parse_scenario(kGood, "good.json", {"training.optimizer.weight_decay=1e-50"}));
  const char* linear = R"({"name": "t", "model": {"kind": "linear", "layers": [1, 2], "bias": true,
    "initial_weights": [[1], [-1e39]], "initial_bias": [2e39, 0]},
    "data": {"kind": "inline", "ranks": [[{"x": [[1]], "y": [[1, 1]]}]]}, "cluster": {"ranks": 1},
    "training": {"steps": 1}})";
  is = issues_of(linear);
  EXPECT_TRUE(has_issue(is, "model.initial_weights[1][0]", "outside float32's range")) << dump_issues(is);
  const char* quadratic = R"({"name": "t", "model": {"kind": "quadratic", "initial_w": [0, 4e38], "a": [1, 1],
    "b": [0, 0]}, "data": {"kind": "none"}, "cluster": {"ranks": 1}, "training": {"steps": 1}})";
  is = issues_of(quadratic);
  EXPECT_TRUE(has_issue(is, "model.initial_w[1]", "outside float32's range")) << dump_issues(is);
}

TEST(ConfigErrors, SyntaxErrorNamesFileLineAndColumn) {
  try {
    parse_scenario("{\n  \"name\": \"x\",\n  \"model\": {\"kind\": \"mlp\",}\n}", "s.json");
    FAIL() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.file(), "s.json:3:27") << e.what();  // the "}" after the trailing comma
    EXPECT_NE(std::string(e.what()).find("JSON syntax error"), std::string::npos);
  }
}

TEST(ConfigErrors, UnknownKeysWithDidYouMean) {
  auto is = issues_of(R"({"name": "t", "trainig": {}, "training": {"optimizr": {"lr": 1}, "steps": 2},
                         "model": {"kind": "mlp", "layers": [784, 10], "activaton": "relu"}, "lr": 0.1})");
  EXPECT_TRUE(has_issue(is, "trainig", "did you mean \"training\"")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "training.optimizr", "did you mean \"training.optimizer\"")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "model.activaton", "did you mean \"model.activation\"")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "lr", "did you mean \"training.optimizer.lr\"")) << dump_issues(is);
}

TEST(ConfigErrors, WrongTypesAndRangesAllAtOnce) {
  auto is = issues_of(R"({"name": "t", "cluster": {"ranks": 0},
    "training": {"optimizer": {"lr": 0, "kind": "sgdd"}, "accumulation_steps": 0, "steps": "ten"},
    "data": {"batch_per_rank": 0, "shuffle": "yes"}, "model": {"layers": [784, -3, 10]}})");
  EXPECT_TRUE(has_issue(is, "cluster.ranks", "expected an integer >= 1")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "training.optimizer.lr", "expected a number > 0, got 0")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "training.optimizer.kind", "one of \"sgd\", \"adam\", \"adamw\"")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "training.accumulation_steps", ">= 1")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "training.steps", "expected an integer")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "data.batch_per_rank", ">= 1")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "data.shuffle", "true or false")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "model.layers[1]", "expected an integer >= 1")) << dump_issues(is);
  EXPECT_GE(is.size(), 8u);
}

TEST(ConfigErrors, NegativeLearningRateAndAbsurdRanks) {
  auto is = issues_of(R"({"training": {"optimizer": {"lr": -1}}, "cluster": {"ranks": 100000}})");
  EXPECT_TRUE(has_issue(is, "training.optimizer.lr", "> 0")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "cluster.ranks", "<= 1024")) << dump_issues(is);
}

TEST(ConfigErrors, CrossFieldRules) {
  auto is = issues_of(R"({"model": {"kind": "mlp", "layers": [10, 10]}, "data": {"kind": "fashion_mnist"},
                          "report": {"trace": true}})");
  EXPECT_TRUE(has_issue(is, "model.layers[0]", "784")) << dump_issues(is);
  auto is2 = issues_of(R"({"model": {"kind": "quadratic", "a": [1], "b": [0], "initial_w": [1]}})");
  EXPECT_TRUE(has_issue(is2, "data.kind", "\"none\"")) << dump_issues(is2);
  auto is3 = issues_of(R"({"model": {"kind": "mlp", "layers": [784, 4096, 10]}, "report": {"trace": true}})");
  EXPECT_TRUE(has_issue(is3, "report.trace", "10000")) << dump_issues(is3);
}

TEST(ConfigErrors, SweepProblems) {
  auto is = issues_of(R"({"name": "t", "sweep": {"axes": {"training.lr": [0.1], "cluster.ranks": [1, 0, 2]},
    "zip": [{"training.steps": [1, 2], "training.seed": [1]}], "repeats": 0, "seeds": 3}})");
  EXPECT_TRUE(has_issue(is, "sweep.axes[\"training.lr\"]", "did you mean \"training.optimizer.lr\""))
      << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "sweep.zip[0][\"training.seed\"]", "expected 2 values")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "sweep.repeats", ">= 1")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "sweep.seeds", "did you mean \"sweep.repeats\"")) << dump_issues(is);
  // A bad swept value is named by its place in the sweep.
  auto is2 = issues_of(std::string(kGood).insert(1, R"("sweep": {"axes": {"cluster.ranks": [1, 0, 2]}},)"));
  EXPECT_TRUE(has_issue(is2, "sweep.axes[\"cluster.ranks\"][1]", ">= 1")) << dump_issues(is2);
}

TEST(ConfigErrors, OverridesAreCheckedLikeTheFile) {
  auto is = issues_of(kGood, {"training.optimizer.lr=-2", "training.stepz=3", "nonsense", "training.steps=1e400"});
  EXPECT_TRUE(has_issue(is, "training.optimizer.lr", "> 0")) << dump_issues(is);
  // QA: the file is named at the head of the list, so a bad value given on the command line says where it came from.
  EXPECT_TRUE(has_issue(is, "training.optimizer.lr", "(the value of --set training.optimizer.lr, not of the file)"))
      << dump_issues(is);
  auto file_only = issues_of(R"({"name": "t", "training": {"steps": 2, "optimizer": {"lr": -2}}})");
  EXPECT_TRUE(has_issue(file_only, "training.optimizer.lr", "> 0")) << dump_issues(file_only);
  EXPECT_FALSE(has_issue(file_only, "training.optimizer.lr", "--set")) << dump_issues(file_only);
  EXPECT_TRUE(has_issue(is, "--set training.steps", "a double can hold, got 1e400")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "--set training.stepz", "did you mean \"training.steps\"")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "--set nonsense", "dotted.path=value")) << dump_issues(is);
}

// QA6 F1: a data.path naming a folder whose name is not UTF-8 threw nlohmann's "invalid UTF-8 byte" (no path) while
// validating the dataset, and hid every other problem. Such a folder is a usable data.path (the run reads it byte for
// byte, the report writes U+FFFD); the other problems are listed at their paths.
TEST(ConfigErrors, DataPathThatIsNotUtf8IsUsableAndTheOtherProblemsStillListed) {
  const std::string dataset = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::is_directory(dataset)) GTEST_SKIP() << dataset << " is not installed";
  // One name per process: test runs of other checkouts on this machine make and remove theirs at the same time.
  const std::string link =
      (std::filesystem::temp_directory_path() / ("gs_fm\xff" "dir" + std::to_string(::getpid()))).string();
  std::error_code ec;
  std::filesystem::remove(link, ec);
  std::filesystem::create_directory_symlink(dataset, link);
  const std::string fm = R"({"name": "t", "model": {"kind": "mlp", "layers": [784, 8, 10]},
    "data": {"kind": "fashion_mnist"}, "training": {"steps": 3}})";
  EXPECT_NO_THROW(parse_scenario(fm, "t.json", {"data.path=" + link}));
  // eval_\xff is no metric: named at its path (not a type_error), beside the steps problem.
  auto is = issues_of(fm, {"data.path=" + link, "training.target.metric=eval_\xff" "accuracy", "training.steps=0"});
  std::filesystem::remove(link, ec);
  EXPECT_EQ(is.size(), 2u) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "training.target.metric", "eval_accuracy")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "training.steps", ">= 1")) << dump_issues(is);
}

// QA: --set description=... and --set 'model={...}' said "unknown key". A section takes a JSON object that replaces
// it (fields left out take their defaults; an axis inside it is dropped, as for a field), anything else says what a
// section expects; description and the sweep block are refused with the reason.
TEST(ConfigErrors, SetOnASectionReplacesItAndSaysWhyOtherwise) {
  std::string swept = std::string(kGood).insert(1, R"("sweep": {"axes": {"model.layers": [[8, 4, 3], [8, 6, 3]],
    "training.steps": [3, 5]}},)");
  // The file's model also turns the bias off; the replacing object leaves bias out, so it takes the default (true).
  swept.replace(swept.find(R"("layers": [8, 4, 3]})"), 20, R"("layers": [8, 4, 3], "bias": false})");
  ASSERT_NE(swept.find(R"("bias": false)"), std::string::npos);
  Scenario s = parse_scenario(swept, "t.json", {R"(model={"kind": "linear", "layers": [8, 3]})"});
  ASSERT_EQ(s.runs.size(), 2u);  // the model.layers axis left with the model; training.steps still sweeps
  for (const auto& r : s.runs) {
    EXPECT_EQ(r.config.model.kind, "linear");
    EXPECT_EQ(r.config.model.layers, (std::vector<int64_t>{8, 3}));
    EXPECT_TRUE(r.config.model.bias);  // left out: the default (true), not the file's false
  }
  EXPECT_EQ(s.runs[0].config.training.steps, 3);
  EXPECT_EQ(s.runs[1].config.training.steps, 5);
  // A nested section, then one of its fields: applied in order.
  Scenario s2 = parse_scenario(kGood, "t.json", {R"(training.optimizer={"kind": "adam", "lr": 0.01})",
                                                 "training.optimizer.beta2=0.99"});
  EXPECT_EQ(s2.runs.at(0).config.training.optimizer.kind, "adam");
  EXPECT_DOUBLE_EQ(s2.runs.at(0).config.training.optimizer.lr, 0.01);
  EXPECT_DOUBLE_EQ(s2.runs.at(0).config.training.optimizer.beta2, 0.99);
  // The replacing object is checked like the file.
  auto bad = issues_of(kGood, {R"(model={"kind": "mlp", "layerz": [8, 3]})"});
  EXPECT_TRUE(has_issue(bad, "model.layerz", "did you mean \"model.layers\"")) << dump_issues(bad);
  auto is = issues_of(kGood, {"model=linear", "training.optimizer=[1]", "description=second try", "sweep.repeats=3"});
  ASSERT_EQ(is.size(), 4u) << dump_issues(is);
  EXPECT_EQ(is[0].path, "--set model");
  EXPECT_EQ(is[0].message, "model is a section: expected a JSON object {...} that replaces it (its fields left out "
                           "take their defaults), or set one of its fields: model.kind=..., model.layers=..., "
                           "model.activation=..., got linear");
  EXPECT_EQ(is[1].path, "--set training.optimizer");
  EXPECT_NE(is[1].message.find("training.optimizer is a section: expected a JSON object"), std::string::npos);
  EXPECT_NE(is[1].message.find("training.optimizer.kind=..."), std::string::npos);
  EXPECT_EQ(is[2].path, "--set description");
  EXPECT_NE(is[2].message.find("not a field of the runs"), std::string::npos) << is[2].message;
  EXPECT_EQ(is[3].path, "--set sweep.repeats");
  EXPECT_NE(is[3].message.find("the sweep block is not a field of the runs"), std::string::npos) << is[3].message;
}

// QA: null in a zip's values was refused ("expected a number > 0, got null"), as in an axis. null in a sweep value
// (axis or zip) or a --set value now means "not set": the field's default, as if the key were left out, for every
// field. The defaults come from scenarios/README.md's field table (lr 0.05, compression.ratio 0.01, storage
// "local_nvme").
TEST(ConfigSweep, NullInASweepValueIsTheFieldsDefault) {
  const std::string head = R"({"name": "n", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}, "storage": "nfs"}, )";
  Scenario axis = parse_scenario(head + R"("training": {"steps": 3, "optimizer": {"lr": 0.3}},
    "sweep": {"axes": {"training.optimizer.lr": [0.1, null], "data.storage": [null, "nfs"]}}})", "s.json");
  ASSERT_EQ(axis.runs.size(), 4u);
  EXPECT_DOUBLE_EQ(axis.runs[0].config.training.optimizer.lr, 0.1);
  EXPECT_DOUBLE_EQ(axis.runs[2].config.training.optimizer.lr, 0.05);  // not the base's 0.3: the default
  EXPECT_EQ(axis.runs[0].config.data.storage, json("local_nvme"));
  EXPECT_EQ(axis.runs[1].config.data.storage, json("nfs"));
  EXPECT_EQ(axis.runs[2].id, "n.lr=null.storage=null.r0");
  EXPECT_TRUE(axis.runs[2].swept["training.optimizer.lr"].is_null());
  // Zipped with a kind: the kind-specific field left unset under kind "none" (a base ratio would be refused there).
  Scenario zip = parse_scenario(head + R"("training": {"steps": 3}, "compression": {"ratio": 0.5},
    "sweep": {"zip": [{"compression.kind": ["none", "topk"], "compression.ratio": [null, 0.02]}]}})", "s.json");
  ASSERT_EQ(zip.runs.size(), 2u);
  EXPECT_EQ(zip.runs[0].config.compression.kind, "none");
  EXPECT_DOUBLE_EQ(zip.runs[0].config.compression.ratio, 0.01);
  EXPECT_DOUBLE_EQ(zip.runs[1].config.compression.ratio, 0.02);
  // --set null: back to the default, whatever the file says.
  Scenario set = parse_scenario(head + R"("training": {"steps": 3, "optimizer": {"lr": 0.3}}})", "s.json",
                                {"training.optimizer.lr=null"});
  EXPECT_DOUBLE_EQ(set.runs.at(0).config.training.optimizer.lr, 0.05);
  // A field's default that breaks a rule of the run is still refused, at the sweep value: ranks null is 1 rank,
  // against 2 straggler factors.
  auto is = issues_of(head + R"("training": {"steps": 3}, "cluster": {"stragglers": {"factors": [1, 2]}},
    "sweep": {"zip": [{"cluster.ranks": [2, null]}]}})");
  ASSERT_EQ(is.size(), 1u) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "cluster.stragglers.factors", "(sweep run n.ranks=null)")) << dump_issues(is);
}

TEST(ConfigSweep, GridZipRepeatsAndDescription) {
  std::string text = std::string(kGood).insert(
      1, R"("sweep": {"axes": {"training.accumulation_steps": [1, 2, 4, 8], "cluster.ranks": [1, 2, 4]},
            "zip": [{"training.optimizer.lr": [0.1, 0.2], "training.optimizer.momentum": [0.0, 0.9]}],
            "repeats": 2},)");
  Scenario s = parse_scenario(text, "t.json");
  EXPECT_EQ(s.runs.size(), 4u * 3u * 2u * 2u);
  EXPECT_EQ(describe_expansion(s),
            "48 runs = 4 [training.accumulation_steps] x 3 [cluster.ranks] x 2 [training.optimizer.lr, "
            "training.optimizer.momentum] x 2 [repeats]");
  // Last axis varies fastest; repeats innermost; zip values travel together; repeat r uses seed + r.
  EXPECT_EQ(s.runs[0].config.training.accumulation_steps, 1);
  EXPECT_EQ(s.runs[1].repeat, 1);
  EXPECT_EQ(s.runs[1].config.training.seed, s.runs[0].config.training.seed + 1);
  EXPECT_EQ(s.runs[2].config.training.optimizer.lr, 0.2);
  EXPECT_EQ(s.runs[2].config.training.optimizer.momentum, 0.9);
  EXPECT_EQ(s.runs[4].config.cluster.ranks, 2);
  EXPECT_EQ(s.runs[12].config.training.accumulation_steps, 2);
  EXPECT_EQ(s.runs[0].id, "t.accumulation_steps=1.ranks=1.lr=0.1.momentum=0.0.r0");
  // Every id distinct.
  std::set<std::string> ids;
  for (const auto& r : s.runs) ids.insert(r.id);
  EXPECT_EQ(ids.size(), s.runs.size());
}

TEST(ConfigSweep, OverrideReplacesAnAxis) {
  std::string text = std::string(kGood).insert(1, R"("sweep": {"axes": {"cluster.ranks": [1, 2, 4]}},)");
  Scenario s = parse_scenario(text, "t.json", {"cluster.ranks=3", "name=renamed"});
  ASSERT_EQ(s.runs.size(), 1u);
  EXPECT_EQ(s.runs[0].config.cluster.ranks, 3);
  EXPECT_EQ(s.name, "renamed");
}

TEST(ConfigIds, StableWhenALaterVersionAddsAFieldWithItsDefault) {
  std::string sweep = R"("sweep": {"axes": {"cluster.ranks": [1, 2]}, "repeats": 2},)";
  Scenario a = parse_scenario(std::string(kGood).insert(1, sweep), "t.json");
  // The same scenario spelling out defaults (as a file written for a later version might) keeps every id.
  std::string explicit_defaults = std::string(kGood).insert(1, sweep + R"("sync": {"kind": "allreduce",
      "bucket_mb": 25, "staleness": 0}, "precision": {"mode": "fp32"}, "cluster": {"share_identical": true},)");
  Scenario b = parse_scenario(explicit_defaults, "t.json");
  ASSERT_EQ(a.runs.size(), b.runs.size());
  for (size_t i = 0; i < a.runs.size(); ++i) EXPECT_EQ(a.runs[i].id, b.runs[i].id);
  EXPECT_EQ(a.runs[3].id, "t.ranks=2.r1");
}

TEST(ConfigFields, RoundTripThroughJson) {
  std::vector<ConfigIssue> issues;
  RunConfig c = config_from_json(json::parse(kGood), issues);
  ASSERT_TRUE(issues.empty());
  json j = config_to_json(c);
  RunConfig d = config_from_json(j, issues);
  ASSERT_TRUE(issues.empty()) << issues[0].path << ": " << issues[0].message;
  EXPECT_EQ(config_to_json(d), j);
  EXPECT_EQ(j["training"]["optimizer"]["lr"], 0.05);  // the documented default
  // Integral floats are accepted for integer fields.
  RunConfig e = config_from_json(json::parse(R"({"training": {"steps": 1e3}, "model": {"layers": [784, 10]}})"),
                                 issues);
  EXPECT_EQ(e.training.steps, 1000);
}

// sha256_hex (OpenSSL EVP) against the FIPS 180-2/180-4 example vectors (NIST's published digests: one block, the
// empty message, two blocks, one million 'a'), so a wrong digest, wrong byte order or wrong hex case fails.
TEST(ConfigHash, Sha256KnownAnswers) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(sha256_hex(std::string(1000, 'a')).substr(0, 16), "41edece42d63e8d9");
}

// Fault 1: a mistyped field does not hide the cross-field problems of unrelated fields; a cross-field problem that
// depends on the mistyped field is left out (it would judge a value the user did not write).
TEST(ConfigErrors, TypeErrorsDoNotHideUnrelatedCrossFieldProblems) {
  // lr is mistyped; the teacher's out_dim (3) differs from the model's last width (5): both, each with its path.
  const std::string text = R"({"name": "t", "model": {"kind": "mlp", "layers": [8, 4, 5]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}},
    "training": {"steps": 3, "optimizer": {"lr": "fast"}}})";
  try {
    parse_scenario(text, "bad.json");
    FAIL() << "accepted";
  } catch (const ScenarioError& e) {
    const auto& is = e.issues();
    EXPECT_EQ(is.size(), 2u) << dump_issues(is);
    EXPECT_TRUE(has_issue(is, "training.optimizer.lr", "expected a number > 0, got \"fast\"")) << dump_issues(is);
    EXPECT_TRUE(has_issue(is, "model.layers", "data.teacher.out_dim (3), got 5")) << dump_issues(is);
    const std::string what = e.what();  // every line names the file and the JSON path
    EXPECT_NE(what.find("bad.json: training.optimizer.lr: "), std::string::npos) << what;
    EXPECT_NE(what.find("bad.json: model.layers: "), std::string::npos) << what;
  }
  // cluster.ranks is mistyped: "at most cluster.ranks" for co-located shards depends on it and is left out, while
  // the unrelated eval_accuracy target out of (0, 1] stays.
  auto dep = issues_of(R"({"name": "t", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "cluster": {"ranks": "four"},
    "sync": {"kind": "parameter_server", "shards": 6},
    "training": {"steps": 3, "target": {"metric": "eval_accuracy", "value": 80}}})");
  EXPECT_EQ(dep.size(), 2u) << dump_issues(dep);
  EXPECT_TRUE(has_issue(dep, "cluster.ranks", "expected an integer")) << dump_issues(dep);
  EXPECT_TRUE(has_issue(dep, "training.target.value", "in (0, 1], got 80")) << dump_issues(dep);
  // A kind that is no choice: the fields of other kinds are not judged against it.
  auto kind = issues_of(R"({"name": "t", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "training": {"steps": 3},
    "compression": {"kind": "topkk", "ratio": 0.5}})");
  EXPECT_EQ(kind.size(), 1u) << dump_issues(kind);
  EXPECT_TRUE(has_issue(kind, "compression.kind", "expected one of")) << dump_issues(kind);
  // Nor a structural problem (found by building the model): an 8-200-100-3 MLP is too large to trace.
  auto trace = issues_of(R"({"name": "t", "model": {"kind": "mlp", "layers": [8, 200, 100, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "report": {"trace": true},
    "training": {"steps": 3, "optimizer": {"lr": "fast"}}})");
  // 8*200 + 200 + 200*100 + 100 + 100*3 + 3 = 22203 parameters, above the 10000 that may be traced.
  EXPECT_EQ(trace.size(), 2u) << dump_issues(trace);
  EXPECT_TRUE(has_issue(trace, "report.trace", "this model has 22203")) << dump_issues(trace);
  // A section that is no object: its fields are unread, so the rules that read them (the teacher's in_dim against
  // model.layers) are not judged; an unrelated rule (an accuracy target of 80) still is.
  auto section = issues_of(R"({"name": "t", "model": "mlp",
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}},
    "training": {"steps": 3, "target": {"metric": "eval_accuracy", "value": 80}}})");
  EXPECT_EQ(section.size(), 2u) << dump_issues(section);
  EXPECT_TRUE(has_issue(section, "model", "expected an object")) << dump_issues(section);
  EXPECT_TRUE(has_issue(section, "training.target.value", "in (0, 1], got 80")) << dump_issues(section);
  // A mistyped base field does not hide a bad sweep value either.
  auto sweep = issues_of(R"({"name": "t", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}},
    "training": {"steps": 3, "optimizer": {"lr": "fast"}}, "sweep": {"axes": {"cluster.ranks": [1, 0]}}})");
  EXPECT_TRUE(has_issue(sweep, "training.optimizer.lr", "expected a number")) << dump_issues(sweep);
  EXPECT_TRUE(has_issue(sweep, "sweep.axes[\"cluster.ranks\"][1]", "expected an integer >= 1")) << dump_issues(sweep);
}

// Parameters of an MLP with biases, from its widths: sum of in*out + out per layer.
int64_t mlp_params(const std::vector<int64_t>& w) {
  int64_t n = 0;
  for (size_t i = 0; i + 1 < w.size(); ++i) n += w[i] * w[i + 1] + w[i + 1];
  return n;
}

// The size limits (report.trace, 2^32 parameters, compression.k, teacher size) are judged whenever their own inputs
// are well-typed, next to a mistyped field elsewhere (cluster.ranks here) or a failing cross-field rule.
TEST(ConfigErrors, OtherProblemsDoNotHideTheSizeLimits) {
  // QA's case: a mistyped cluster.ranks and a 784-64-10 MLP with report.trace.
  auto a12 = issues_of(R"({"name":"a12","model":{"kind":"mlp","layers":[784,64,10]},"data":{"kind":"fashion_mnist"},
    "cluster":{"ranks":"two"},"training":{"steps":10},"report":{"trace":true}})");
  EXPECT_EQ(a12.size(), 2u) << dump_issues(a12);
  EXPECT_TRUE(has_issue(a12, "cluster.ranks", "got \"two\"")) << dump_issues(a12);
  EXPECT_TRUE(has_issue(a12, "report.trace", fmt::format("refused above 10000 parameters; this model has {}",
                                                         mlp_params({784, 64, 10}))))
      << dump_issues(a12);
  // A failing cross-field rule (6 co-located shards for 2 ranks) next to k above the model's 8-4 parameters.
  auto k = issues_of(R"({"name":"k","model":{"kind":"mlp","layers":[8,4]},"data":{"kind":"teacher",
    "teacher":{"in_dim":8,"out_dim":4}},"cluster":{"ranks":2},"sync":{"kind":"parameter_server","shards":6},
    "compression":{"kind":"topk","k":100000},"training":{"steps":3}})");
  EXPECT_TRUE(has_issue(k, "sync.shards", "at most cluster.ranks")) << dump_issues(k);
  EXPECT_TRUE(has_issue(k, "compression.k", fmt::format("at most the model's {} parameters, got 100000",
                                                        mlp_params({8, 4}))))
      << dump_issues(k);
  // The 2^32 parameter limit of a run with arithmetic, next to a mistyped lr (timing mode is not mistyped).
  const std::vector<int64_t> wide = {65536, 65536, 2};
  auto big = issues_of(R"({"name":"big","model":{"kind":"mlp","layers":[65536,65536,2]},"data":{"kind":"teacher",
    "teacher":{"in_dim":65536,"out_dim":2,"hidden":1}},"training":{"steps":3,"optimizer":{"lr":"fast"}}})");
  ASSERT_GT(mlp_params(wide), int64_t{1} << 32);
  EXPECT_TRUE(has_issue(big, "training.optimizer.lr", "expected a number")) << dump_issues(big);
  EXPECT_TRUE(has_issue(big, "model.layers", fmt::format("{} parameters is more than the limit", mlp_params(wide))))
      << dump_issues(big);
  // The teacher's size (hidden x (in_dim + out_dim) weights above 2^30), next to a mistyped training.seed.
  auto teacher = issues_of(R"({"name":"t","model":{"kind":"mlp","layers":[60000,2]},"data":{"kind":"teacher",
    "teacher":{"in_dim":60000,"out_dim":2,"hidden":60000}},"training":{"steps":3,"seed":"x"}})");
  EXPECT_TRUE(has_issue(teacher, "training.seed", "expected")) << dump_issues(teacher);
  EXPECT_TRUE(has_issue(teacher, "data.teacher.hidden",
                        fmt::format("the teacher has {} weights", int64_t{60000} * (60000 + 2))))
      << dump_issues(teacher);
  // A mistyped input of the check itself (the layers) leaves the check out: no guess about the model.
  auto layers = issues_of(R"({"name":"l","model":{"kind":"mlp","layers":[784,"x",10]},"data":{"kind":"fashion_mnist"},
    "training":{"steps":10},"report":{"trace":true}})");
  EXPECT_EQ(layers.size(), 1u) << dump_issues(layers);
}

// Sweep problems are all listed: an unknown path in a zip group does not hide the group's unequal lengths; a bad
// element inside a swept list value is named down to the element; the empty-group message states the rule.
TEST(ConfigErrors, SweepProblemsNameTheirPlaceAndDoNotHideEachOther) {
  const std::string base = R"({"name": "z", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "training": {"steps": 3}, "sweep": )";
  auto zip = issues_of(base + R"({"zip": {"a": [1], "training.steps": [1, 2]}}})");
  EXPECT_EQ(zip.size(), 2u) << dump_issues(zip);
  EXPECT_TRUE(has_issue(zip, "sweep.zip[0][\"a\"]", "is not a configuration field")) << dump_issues(zip);
  // The first list has 1 value, training.steps 2.
  EXPECT_TRUE(has_issue(zip, "sweep.zip[0][\"training.steps\"]", "expected 1 values (as the group's first list), got 2"))
      << dump_issues(zip);
  // One-path groups are valid (the same as an axis), so the empty group's message says "one or more".
  EXPECT_NO_THROW(parse_scenario(base + R"({"zip": {"training.steps": [1, 2]}}})", "s.json"));
  auto empty = issues_of(base + R"({"zip": {}}})");
  ASSERT_EQ(empty.size(), 1u) << dump_issues(empty);
  EXPECT_NE(empty[0].message.find("one or more paths"), std::string::npos) << empty[0].message;
  // The second list of model.layers has a string as its second element: [1][1].
  auto layers = issues_of(base + R"({"axes": {"model.layers": [[8, 4, 3], [8, "x", 3]]}}})");
  ASSERT_EQ(layers.size(), 1u) << dump_issues(layers);
  EXPECT_EQ(layers[0].path, "sweep.axes[\"model.layers\"][1][1]") << dump_issues(layers);
  EXPECT_NE(layers[0].message.find("got \"x\""), std::string::npos) << layers[0].message;
}

// cluster.stragglers.factors as {"RANK": factor}: the named ranks get their factor, the others 1, and "-1" is each
// run's last rank, so "the last rank is 1.5x slower" follows a sweep of cluster.ranks.
TEST(ConfigErrors, StragglerFactorsByRankFollowARanksSweep) {
  const std::string head = R"({"name": "q", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "training": {"steps": 3}, )";
  const Scenario s = parse_scenario(head + R"("cluster": {"ranks": 4, "stragglers": {"factors": {"-1": 1.5, "0": 2}}},
    "sweep": {"axes": {"cluster.ranks": [2, 3, 8]}}})", "s.json");
  ASSERT_EQ(s.runs.size(), 3u);
  EXPECT_EQ(s.runs[0].config.cluster.stragglers.factors, json::parse("[2, 1.5]"));
  EXPECT_EQ(s.runs[1].config.cluster.stragglers.factors, json::parse("[2, 1.0, 1.5]"));
  EXPECT_EQ(s.runs[2].config.cluster.stragglers.factors, json::parse("[2, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.5]"));
  // The modeled clock reads the resolved list: rank 7 of 8 computes 1.5x, rank 3 1x (no noise).
  EXPECT_EQ(straggler_factor(s.runs[2].config.cluster.stragglers, 1, 0, 7), 1.5);
  EXPECT_EQ(straggler_factor(s.runs[2].config.cluster.stragglers, 1, 0, 3), 1.0);

  // A key outside a run's ranks is named for that run only; a key that is no integer, and two keys naming one rank.
  auto far = issues_of(head + R"("cluster": {"ranks": 4, "stragglers": {"factors": {"5": 1.5}}},
    "sweep": {"axes": {"cluster.ranks": [4, 8]}}})");
  ASSERT_EQ(far.size(), 1u) << dump_issues(far);
  EXPECT_TRUE(has_issue(far, "cluster.stragglers.factors[\"5\"]", "outside this run's 4 ranks")) << dump_issues(far);
  EXPECT_TRUE(has_issue(far, "cluster.stragglers.factors[\"5\"]", "(sweep run q.ranks=4)")) << dump_issues(far);
  auto word = issues_of(head + R"("cluster": {"ranks": 4, "stragglers": {"factors": {"last": 1.5}}}})");
  EXPECT_TRUE(has_issue(word, "cluster.stragglers.factors[\"last\"]", "expected a rank index")) << dump_issues(word);
  auto twice = issues_of(head + R"("cluster": {"ranks": 4, "stragglers": {"factors": {"3": 1.5, "-1": 2}}}})");
  ASSERT_EQ(twice.size(), 1u) << dump_issues(twice);
  EXPECT_NE(twice[0].message.find("names rank 3"), std::string::npos) << dump_issues(twice);
  // The values are judged as the list's, > 0 and < 1e6, at the key that gives them, quoting the value as written
  // (not the list it would become, "[1.0,1.0,1.0,0]"), in words that do not depend on the run's ranks (one issue for
  // a sweep of cluster.ranks).
  for (const auto& [value, quoted] : std::vector<std::pair<std::string, std::string>>{
           {"0", "got 0"}, {"-1", "got -1"}, {"\"a\"", "got \"a\""}, {"1e9", "got 1000000000.0"},
           {"1e6", "got 1000000.0"}, {"null", "got null"}, {"[2]", "got [2]"}}) {
    auto bad = issues_of(head + R"("cluster": {"ranks": 4, "stragglers": {"factors": {"-1": )" + value + "}}}}");
    ASSERT_EQ(bad.size(), 1u) << value << "\n" << dump_issues(bad);
    EXPECT_EQ(bad[0].path, "cluster.stragglers.factors[\"-1\"]") << dump_issues(bad);
    EXPECT_NE(bad[0].message.find("expected a compute slowdown factor, a number > 0 and < 1e6, " + quoted), std::string::npos)
        << dump_issues(bad);
    EXPECT_EQ(bad[0].message.find("[1.0"), std::string::npos) << dump_issues(bad);
  }
  // Counts of one in the singular: one rank is "1 rank", its list "1 number".
  auto one = issues_of(head + R"("cluster": {"ranks": 1, "stragglers": {"factors": {"2": 1.5}}}})");
  EXPECT_TRUE(has_issue(one, "cluster.stragglers.factors[\"2\"]", "outside this run's 1 rank (0 to 0")) << dump_issues(one);
  auto one_list = issues_of(head + R"("cluster": {"ranks": 1, "stragglers": {"factors": [0]}}})");
  EXPECT_TRUE(has_issue(one_list, "cluster.stragglers.factors", "a list of 1 number > 0 and < 1e6 (one per rank)"))
      << dump_issues(one_list);
}

// A cross-field rule is judged on the runs when the sweep sets a field it reads: the base never runs on its own.
TEST(ConfigErrors, BaseIsNotJudgedOnAFieldTheSweepSets) {
  const std::string head = R"({"name": "q", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "cluster": {"ranks": 2}, )";
  // QA's three cases: every run uses a kind the field applies to.
  EXPECT_NO_THROW(parse_scenario(head + R"("training": {"steps": 3}, "compression": {"ratio": 0.1},
    "sweep": {"axes": {"compression.kind": ["topk", "randomk"]}}})", "s.json"));
  EXPECT_NO_THROW(parse_scenario(head + R"("training": {"steps": 3, "optimizer": {"lr": 0.001, "beta2": 0.99}},
    "sweep": {"axes": {"training.optimizer.kind": ["adam", "adamw"]}}})", "s.json"));
  EXPECT_NO_THROW(parse_scenario(head + R"("training": {"steps": 3, "optimizer": {"kind": "adam", "momentum": 0.9}},
    "sweep": {"axes": {"training.optimizer.kind": ["sgd"]}}})", "s.json"));
  // The same through a zip group.
  EXPECT_NO_THROW(parse_scenario(head + R"("training": {"steps": 3}, "compression": {"ratio": 0.1},
    "sweep": {"zip": [{"compression.kind": ["topk", "dgc"], "training.steps": [3, 4]}]}})", "s.json"));
  // Straggler factors: 2 factors for the base's 4 ranks, but every run has 2 ranks.
  const std::string four = R"({"name": "q", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "training": {"steps": 3},
    "cluster": {"ranks": 4, "stragglers": {"factors": [1.0, 2.0]}}, )";
  EXPECT_NO_THROW(parse_scenario(four + R"("sweep": {"axes": {"cluster.ranks": [2]}}})", "s.json"));
  // Runs with 2 and 4 ranks: only the 4-rank run is refused, named.
  auto ranks = issues_of(four + R"("sweep": {"axes": {"cluster.ranks": [2, 4]}}})");
  ASSERT_EQ(ranks.size(), 1u) << dump_issues(ranks);
  EXPECT_TRUE(has_issue(ranks, "cluster.stragglers.factors", "(sweep run q.ranks=4)")) << dump_issues(ranks);
  // Some runs really violate the rule: those runs, and only those, are named (kind none and fp16; topk is fine).
  auto some = issues_of(head + R"("training": {"steps": 3}, "compression": {"ratio": 0.1},
    "sweep": {"axes": {"compression.kind": ["topk", "none", "fp16"]}}})");
  ASSERT_EQ(some.size(), 2u) << dump_issues(some);
  EXPECT_TRUE(has_issue(some, "compression.ratio", "(it is \"none\") (sweep run q.kind=none)")) << dump_issues(some);
  EXPECT_TRUE(has_issue(some, "compression.ratio", "(it is \"fp16\") (sweep run q.kind=fp16)")) << dump_issues(some);
  // The rule's fields not swept: the base's own problem, reported once without runs.
  auto base = issues_of(head + R"("training": {"steps": 3}, "compression": {"ratio": 0.1},
    "sweep": {"axes": {"training.steps": [3, 4]}}})");
  ASSERT_EQ(base.size(), 1u) << dump_issues(base);
  EXPECT_EQ(base[0].path, "compression.ratio");
  EXPECT_EQ(base[0].message.find("sweep run"), std::string::npos) << base[0].message;
  EXPECT_NE(base[0].message.find("(it is \"none\")"), std::string::npos) << base[0].message;
  // A problem on a path the sweep leaves alone stays the base's.
  auto swept = issues_of(head + R"("training": {"steps": 3}, "compression": {"kind": "nope"},
    "sweep": {"axes": {"training.steps": [3, 4]}}})");
  EXPECT_TRUE(has_issue(swept, "compression.kind", "")) << dump_issues(swept);
}

// QA: a base value that is invalid on the swept path itself was refused although every run replaces it. Dropped now
// (axes and zip groups); a run whose swept value has the same problem is refused at its place in the sweep, named.
TEST(ConfigErrors, BaseValueOnASweptPathIsReplacedByEveryRun) {
  const std::string head = R"({"name": "q", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, )";
  Scenario s = parse_scenario(head + R"("training": {"steps": 3, "optimizer": {"lr": -1}},
    "sweep": {"axes": {"training.optimizer.lr": [0.1, 0.2]}}})", "s.json");
  ASSERT_EQ(s.runs.size(), 2u);
  EXPECT_DOUBLE_EQ(s.runs[0].config.training.optimizer.lr, 0.1);
  EXPECT_DOUBLE_EQ(s.runs[1].config.training.optimizer.lr, 0.2);
  // Inside a swept value (model.layers[1] = 0) and through a zip group; a cross-field rule on the swept field
  // (compression.ratio under kind none) with every run's kind fitting.
  EXPECT_NO_THROW(parse_scenario(R"({"name": "q", "model": {"kind": "mlp", "layers": [8, 0, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "training": {"steps": 3},
    "sweep": {"zip": [{"model.layers": [[8, 4, 3], [8, 6, 3]], "training.steps": [3, 4]}]}})", "s.json"));
  EXPECT_NO_THROW(parse_scenario(head + R"("training": {"steps": 3}, "compression": {"kind": "none", "ratio": 7},
    "sweep": {"zip": [{"compression.kind": ["topk", "dgc"], "compression.ratio": [0.1, 0.2]}]}})", "s.json"));
  // A run that keeps the invalid value (the sweep gives it again): that run is refused, at its place in the sweep;
  // the other run's value is fine and the base's value is not reported on its own.
  auto is = issues_of(head + R"("training": {"steps": 3, "optimizer": {"lr": -1}},
    "sweep": {"axes": {"training.optimizer.lr": [0.1, -1]}}})");
  ASSERT_EQ(is.size(), 1u) << dump_issues(is);
  EXPECT_EQ(is[0].path, "sweep.axes[\"training.optimizer.lr\"][1]");
  EXPECT_NE(is[0].message.find("expected a number > 0, got -1"), std::string::npos) << is[0].message;
  // --set on the swept path drops the axis: the overriding value is judged as the base's.
  auto set = issues_of(head + R"("training": {"steps": 3}, "sweep": {"axes": {"training.optimizer.lr": [0.1, 0.2]}}})",
                       {"training.optimizer.lr=-3"});
  ASSERT_EQ(set.size(), 1u) << dump_issues(set);
  EXPECT_EQ(set[0].path, "training.optimizer.lr");
  // A section that is no object, with a field inside it swept (and set): its own problem, once (was a JSON
  // exception without file or path).
  auto section = issues_of(R"({"name": "q", "model": 5, "training": {"steps": 3},
    "sweep": {"axes": {"model.layers": [[8, 4, 3], [8, 6, 3]]}}})", {"model.activation=gelu"});
  ASSERT_EQ(section.size(), 1u) << dump_issues(section);
  EXPECT_EQ(section[0].path, "model");
  EXPECT_EQ(section[0].message, "expected an object, got 5");
}

// A value of f other than its default, within its type and range (null when the test has none to offer).
json other_value(const FieldInfo& f) {
  switch (f.type) {
    case FieldType::kBool:
      return !f.default_value.get<bool>();
    case FieldType::kString:
      for (const auto& c : f.choices)
        if (json(c) != f.default_value) return c;
      return f.choices.empty() ? json("other") : json();
    case FieldType::kInt:
    case FieldType::kNumber: {
      const double d = f.default_value.get<double>();
      auto fits = [&](double x) {
        return (f.min_exclusive ? x > f.min : x >= f.min) && (f.max_exclusive ? x < f.max : x <= f.max) && x != d;
      };
      for (double x : {d + 1, d / 2, f.min + 1, 0.5})
        if (fits(x)) return f.type == FieldType::kInt ? json(static_cast<int64_t>(x)) : json(x);
      return json();
    }
    case FieldType::kIntList:
      return json::array({8, 4, 3});
    case FieldType::kJson:
      return json::array({1});
  }
  return json();
}

// Fault 4's whole kind: every field whose doc starts with "<kinds>: " (each kind a choice of one selector field,
// separated by ", " or "/"; further "; <kind>:" or ". <kind>:" sections add kinds) is refused, with "only applies
// when <selector> is ...", when set (to a value other than its default) under each other choice of the selector.
// The expected sets come from the docs, not from the rule table.
TEST(ConfigErrors, FieldsDocumentedForSomeKindsAreRefusedUnderTheOthers) {
  std::set<std::string> covered;
  int cases = 0;
  for (const auto& f : config_fields()) {
    const size_t colon = f.doc.find(':');
    if (colon == std::string::npos) continue;
    std::vector<std::string> tokens;
    std::string head = f.doc.substr(0, colon);
    for (char& ch : head)
      if (ch == '/') ch = ',';
    std::stringstream ss(head);
    for (std::string t; std::getline(ss, t, ',');) {
      t.erase(0, t.find_first_not_of(' '));
      tokens.push_back(t);
    }
    const FieldInfo* selector = nullptr;
    int selectors = 0;
    auto has = [](const std::vector<std::string>& v, const std::string& x) {
      return std::find(v.begin(), v.end(), x) != v.end();
    };
    bool own = true;  // the doc lists the field's own choices ("auto: ..."): not about another field
    for (const auto& t : tokens) own = own && has(f.choices, t);
    if (own) continue;
    for (const auto& g : config_fields()) {
      if (g.path == f.path || g.choices.empty()) continue;
      bool all = true;
      for (const auto& t : tokens) all = all && has(g.choices, t);
      if (all) {
        selector = &g;
        ++selectors;
      }
    }
    if (selector == nullptr) continue;
    ASSERT_EQ(selectors, 1) << f.path << ": its doc's kinds fit more than one selector";
    std::vector<std::string> kinds = tokens;
    for (const auto& c : selector->choices)
      if (f.doc.find("; " + c + ":") != std::string::npos || f.doc.find(". " + c + ":") != std::string::npos)
        kinds.push_back(c);
    const json value = other_value(f);
    ASSERT_FALSE(value.is_null()) << f.path;
    for (const auto& k : selector->choices) {
      if (has(kinds, k)) continue;
      json doc = {{"name", "t"}};
      doc[json::json_pointer("/" + std::regex_replace(selector->path, std::regex("\\."), "/"))] = k;
      doc[json::json_pointer("/" + std::regex_replace(f.path, std::regex("\\."), "/"))] = value;
      std::vector<ConfigIssue> is;
      config_from_json(doc, is);
      bool refused = false;
      for (const auto& i : is)
        refused = refused || ((i.path == f.path || f.path.rfind(i.path + ".", 0) == 0) &&
                              i.message.find("only applies when " + selector->path + " is ") != std::string::npos);
      EXPECT_TRUE(refused) << f.path << " = " << value.dump() << " under " << selector->path << " \"" << k
                           << "\" is not refused:\n" << dump_issues(is);
      covered.insert(f.path);
      ++cases;
    }
  }
  // The doc parsing found the fields QA named and the audit's additions (so the walk cannot pass by finding none).
  for (const char* p : {"compression.divide", "sync.shards", "sync.bucket_mb", "training.optimizer.beta1",
                        "training.optimizer.momentum", "training.schedule.gamma", "precision.growth_factor",
                        "precision.initial_scale", "precision.amax_history_len", "model.layers", "model.activation",
                        "cluster.stragglers.noise.sigma", "data.cache.capacity_bytes", "data.teacher.hidden",
                        "cluster.stragglers.inject", "model.sequence_length", "compression.error_feedback",
                        "compression.measure_error"})
    EXPECT_TRUE(covered.count(p)) << p;
  EXPECT_GT(cases, 100);
}

// QA: compression.measure_error was accepted under compression.kind "none". Its default is true (a resolved config
// in a report carries it, and a field at its default is always accepted), so false there is refused like any field
// of other kinds and a written true is noted; under a compressor both are accepted.
TEST(ConfigErrors, MeasureErrorUnderNoCompressionIsRefusedOrNoted) {
  const std::string head = R"({"name": "m", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "training": {"steps": 3}, )";
  auto is = issues_of(head + R"("compression": {"kind": "none", "measure_error": false}})");
  ASSERT_EQ(is.size(), 1u) << dump_issues(is);
  EXPECT_EQ(is[0].path, "compression.measure_error");
  EXPECT_EQ(is[0].message.rfind("only applies when compression.kind is \"fp16\", ", 0), 0u) << is[0].message;
  // The lossy kinds up to powersgd (a compressor added by a registry line comes after it), then the kind given.
  EXPECT_NE(is[0].message.find(", \"onebit\""), std::string::npos) << is[0].message;
  EXPECT_NE(is[0].message.find("\"powersgd\""), std::string::npos) << is[0].message;
  const std::string tail = " (it is \"none\")";
  ASSERT_GE(is[0].message.size(), tail.size());
  EXPECT_EQ(is[0].message.substr(is[0].message.size() - tail.size()), tail) << is[0].message;
  Scenario noted = parse_scenario(head + R"("compression": {"measure_error": true},
    "sweep": {"axes": {"compression.kind": ["none", "fp16"]}}})", "s.json");
  ASSERT_EQ(noted.notes.size(), 1u);
  EXPECT_EQ(noted.notes[0].path, "compression.measure_error");
  EXPECT_NE(noted.notes[0].message.find("(nothing is compressed, so no error is measured; run m.kind=none)"),
            std::string::npos) << noted.notes[0].message;
  EXPECT_TRUE(parse_scenario(head + R"("compression": {"kind": "topk", "measure_error": false}})", "s.json")
                  .notes.empty());
  // The three fields QA named as lacking the doc prefix: refused under another kind with the same wording.
  auto seq = issues_of(kGood, {"model.sequence_length=128"});
  EXPECT_TRUE(has_issue(seq, "model.sequence_length", "only applies when model.kind is \"gpt2-small\", \"gpt2-xl\", "
                                                     "\"llama-7b\", \"mpt-125m\"")) << dump_issues(seq);
  EXPECT_TRUE(has_issue(seq, "model.sequence_length", "or \"mpt-7b\" (it is \"mlp\")")) << dump_issues(seq);
  auto ef = issues_of(head + R"("compression": {"kind": "dgc", "error_feedback": true}})");
  EXPECT_TRUE(has_issue(ef, "compression.error_feedback", "only applies when compression.kind is \"fp16\"")) << dump_issues(ef);
}

// compression.divide under the parameter server (QA's case): refused, whatever the cast.
TEST(ConfigErrors, CompressionDivideIsRefusedUnderTheParameterServer) {
  for (const char* divide : {"post", "split"}) {
    auto is = issues_of(fmt::format(R"({{"name": "d", "model": {{"kind": "mlp", "layers": [8, 4, 3]}},
      "data": {{"kind": "teacher", "teacher": {{"in_dim": 8, "out_dim": 3}}}}, "training": {{"steps": 3}},
      "cluster": {{"ranks": 2}}, "sync": {{"kind": "parameter_server"}},
      "compression": {{"kind": "fp16", "divide": "{}"}}}})", divide));
    ASSERT_EQ(is.size(), 1u) << dump_issues(is);
    EXPECT_EQ(is[0].path, "compression.divide");
    EXPECT_EQ(is[0].message, "only applies when sync.kind is \"allreduce\" or \"zero\" (it is \"parameter_server\")");
  }
}

// --set values are JSON inputs too: one nested deeper than 64 levels is refused before parsing (100000 levels would
// overflow the parser's stack).
TEST(ConfigErrors, DeepSetValueIsRefusedBeforeParsing) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto is = issues_of(R"({"name": "s", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "training": {"steps": 3}})",
                      {"model.a=" + deep});
  ASSERT_EQ(is.size(), 1u) << dump_issues(is);
  EXPECT_EQ(is[0].path, "--set model.a");
  EXPECT_EQ(is[0].message, "JSON nested deeper than 64 levels");
}

// The dataset checks (one global batch against the training set) run next to a failing rule on another field.
TEST(ConfigErrors, AFailingRuleElsewhereDoesNotHideTheDatasetChecks) {
  // 2 ranks x 1 micro-batch x 64 samples = 128 > the teacher's 100 training samples; 6 co-located shards > 2 ranks.
  auto is = issues_of(R"({"name": "b", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "batch_per_rank": 64, "teacher": {"in_dim": 8, "out_dim": 3, "train_samples": 100}},
    "cluster": {"ranks": 2}, "sync": {"kind": "parameter_server", "shards": 6}, "training": {"steps": 3}})");
  EXPECT_TRUE(has_issue(is, "sync.shards", "at most cluster.ranks")) << dump_issues(is);
  bool batch = false;
  for (const auto& i : is)
    batch = batch || (i.path.rfind("data.", 0) == 0 && i.message.find("128") != std::string::npos &&
                      i.message.find("100") != std::string::npos);
  EXPECT_TRUE(batch) << dump_issues(is);
}

// cluster.stragglers.factors states its whole range: each factor > 0 and < 1e6 (1e7 is out).
TEST(ConfigErrors, StragglerFactorsStateTheirWholeRange) {
  auto is = issues_of(R"({"name": "f", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "training": {"steps": 3},
    "cluster": {"ranks": 2, "stragglers": {"factors": [1e7, 1]}}})");
  ASSERT_EQ(is.size(), 1u) << dump_issues(is);
  EXPECT_EQ(is[0].path, "cluster.stragglers.factors");
  EXPECT_NE(is[0].message.find("2 numbers > 0 and < 1e6 (one per rank)"), std::string::npos) << is[0].message;
}

// Fault 4: a problem of expanded runs on a path that is not swept names the runs it comes from (8 of the 10 grid
// points: staleness 1..4 x ranks 2, 16; their ids in expansion order, the first three shown).
TEST(ConfigErrors, ProblemsOfExpandedRunsNameTheRuns) {
  auto is = issues_of(R"({"name": "t4", "model": {"kind": "gpt2-small"}, "data": {"kind": "none"},
    "training": {"steps": 5, "mode": "timing"}, "sync": {"kind": "parameter_server"},
    "sweep": {"axes": {"sync.staleness": [0, 1, 2, 3, 4], "cluster.ranks": [2, 16]}}})");
  ASSERT_EQ(is.size(), 1u) << dump_issues(is);
  EXPECT_EQ(is[0].path, "training.mode");
  const std::string tail = "(sweep runs t4.staleness=1.ranks=2, t4.staleness=1.ranks=16, t4.staleness=2.ranks=2 "
                           "and 5 more)";
  ASSERT_GE(is[0].message.size(), tail.size());
  EXPECT_EQ(is[0].message.substr(is[0].message.size() - tail.size()), tail) << is[0].message;
  // One run: named alone. DGC without an expected density in a timing-only run, compression not swept: the run is
  // named.
  auto one = issues_of(R"({"name": "t5", "model": {"kind": "gpt2-small"}, "data": {"kind": "none"},
    "training": {"steps": 5}, "compression": {"kind": "dgc"},
    "sweep": {"axes": {"training.mode": ["timing"], "cluster.ranks": [2]}}})");
  ASSERT_FALSE(one.empty());
  bool named = false;
  for (const auto& i : one)
    named = named || (i.path == "compression.expected_density" &&
                      i.message.find("(sweep run t5.mode=timing.ranks=2)") != std::string::npos);
  EXPECT_TRUE(named) << dump_issues(one);
  // Swept seeds past the largest seed with the repeats: named by the seed's place in the sweep.
  auto seed = issues_of(std::string(kGood).substr(0, std::string(kGood).size() - 1) +
                        R"(, "sweep": {"axes": {"training.seed": [1, 4294967295]}, "repeats": 2}})");
  EXPECT_TRUE(has_issue(seed, "sweep.repeats", "(sweep run t.seed=4294967295)")) << dump_issues(seed);
  // A problem inside a swept JSON value is named by its place in the sweep and its path inside the value.
  auto storage = issues_of(std::string(kGood).substr(0, std::string(kGood).size() - 1) +
                           R"(, "sweep": {"axes": {"data.storage": ["nfs", {"bandwidth_GBps": 1, "latency_us": -5,
                              "concurrency": 2}]}}})");
  EXPECT_TRUE(has_issue(storage, "sweep.axes[\"data.storage\"][1].latency_us", "expected a number in [0,"))
      << dump_issues(storage);
}

// Fault 3: more ranks than the hardware profile's GPUs is allowed (docs/cost-model.md: the collective model then
// describes a larger node of the same fabric) and said in a note naming cluster.ranks, the profile file and its GPU
// count; the count is read here from the profile file itself.
TEST(ConfigNotes, MoreRanksThanTheProfilesGpusIsNoted) {
  std::ifstream in(hardware_dir() + "/h100-pcie-8.json");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const int64_t gpus = json::parse(ss.str())["gpus_per_node"]["value"].get<int64_t>();
  const std::string base = R"({"name": "t", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "training": {"steps": 3},
    "cluster": {"hardware": "h100-pcie-8"}, "sweep": {"axes": {"cluster.ranks": )";
  Scenario within = parse_scenario(base + fmt::format("[1, {}]}}}}}}", gpus), "s.json");
  EXPECT_TRUE(within.notes.empty());
  Scenario over = parse_scenario(base + fmt::format("[1, {}, {}]}}}}}}", gpus + 1, 2 * gpus), "s.json");
  EXPECT_EQ(over.runs.size(), 3u);  // allowed
  ASSERT_EQ(over.notes.size(), 1u);
  const std::string& m = over.notes[0].message;
  EXPECT_EQ(over.notes[0].path, "cluster.ranks");
  EXPECT_EQ(m.rfind(fmt::format("{} and {} are more than the {} GPUs of hardware profile \"h100-pcie-8\" ({})",
                                gpus + 1, 2 * gpus, gpus, hardware_dir() + "/h100-pcie-8.json"), 0), 0u) << m;
  EXPECT_NE(m.find(fmt::format("nodes of {} ranks", gpus)), std::string::npos) << m;
  // A one-GPU profile, three values over it: singular GPU and rank, "a, b and c".
  std::ifstream one_in(hardware_dir() + "/h200-1.json");
  std::stringstream one_ss;
  one_ss << one_in.rdbuf();
  ASSERT_EQ(json::parse(one_ss.str())["gpus_per_node"]["value"].get<int64_t>(), 1);
  Scenario one = parse_scenario(R"({"name": "t", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "training": {"steps": 3},
    "cluster": {"hardware": "h200-1"}, "sweep": {"axes": {"cluster.ranks": [1, 2, 3, 4]}}})", "s.json");
  ASSERT_EQ(one.notes.size(), 1u);
  EXPECT_EQ(one.notes[0].message.rfind("2, 3 and 4 are more than the 1 GPU of hardware profile \"h200-1\"", 0), 0u)
      << one.notes[0].message;
  EXPECT_NE(one.notes[0].message.find("nodes of 1 rank (docs"), std::string::npos) << one.notes[0].message;
}

// A sweep over two profiles that the ranks exceed gets one note naming both (it printed one note per profile, alike
// but for the name: read as the same note twice), each with its own GPU count from its file.
TEST(ConfigNotes, RanksOverTheGpusOfSeveralProfilesIsOneNote) {
  auto gpus_in = [](const std::string& name) {
    std::ifstream in(hardware_dir() + "/" + name + ".json");
    std::stringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str())["gpus_per_node"]["value"].get<int64_t>();
  };
  const int64_t pcie = gpus_in("h100-pcie-8"), four = gpus_in("h100-sxm-4");
  ASSERT_LT(four, pcie);
  Scenario s = parse_scenario(fmt::format(R"({{"name": "t", "model": {{"kind": "mlp", "layers": [8, 4, 3]}},
    "data": {{"kind": "teacher", "teacher": {{"in_dim": 8, "out_dim": 3}}}}, "training": {{"steps": 3}},
    "sweep": {{"axes": {{"cluster.hardware": ["h100-pcie-8", "h100-sxm-4"], "cluster.ranks": [{}, {}]}}}}}})",
                                          four + 1, pcie + 1), "s.json");
  ASSERT_EQ(s.notes.size(), 1u);
  const std::string& m = s.notes[0].message;
  EXPECT_EQ(m.rfind(fmt::format("{} is more than the {} GPUs of hardware profile \"h100-pcie-8\" ({}); {} and {} are "
                                "more than the {} GPUs of hardware profile \"h100-sxm-4\" ({}): allowed",
                                pcie + 1, pcie, hardware_dir() + "/h100-pcie-8.json", four + 1, pcie + 1, four,
                                hardware_dir() + "/h100-sxm-4.json"), 0), 0u) << m;
  EXPECT_NE(m.find("nodes of each profile's GPU count (docs"), std::string::npos) << m;
}

}  // namespace
}  // namespace gs

namespace gs {
namespace {

TEST(ConfigErrors, NameMustBeAFolderName) {
  for (const char* bad : {"..", "../../escape", "/abs", "", "a/b", "-x", "line\nbreak"}) {
    json s = json::parse(kGood);
    s["name"] = bad;
    auto is = issues_of(s.dump());
    EXPECT_TRUE(has_issue(is, "name", "names the report folder")) << bad << "\n" << dump_issues(is);
  }
  json ok = json::parse(kGood);
  ok["name"] = "my_sweep-2.v1";
  EXPECT_NO_THROW(parse_scenario(ok.dump(), "t.json"));
}

TEST(ConfigErrors, DuplicateKeysDeepNestingAndHugeNumbers) {
  auto dup = issues_of(R"({"training": {"optimizer": {"lr": 0.1, "lr": 0.2}}})");
  EXPECT_TRUE(has_issue(dup, "training.optimizer.lr", "duplicate key")) << dump_issues(dup);
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  try {
    parse_scenario("{\"a\": " + deep + "}", "deep.json");
    FAIL() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than 64"), std::string::npos) << e.what();
    EXPECT_EQ(e.file(), "deep.json:1:70");  // the 65th bracket: 6 characters of {"a": , then 64 more
  }
  auto big = issues_of(R"({"training": {"optimizer": {"lr": 1e400}}})");
  ASSERT_EQ(big.size(), 1u);
  EXPECT_NE(big[0].message.find("1e400"), std::string::npos) << dump_issues(big);
}

TEST(ConfigErrors, RepeatedSweepValuesAndZipPaths) {
  auto twice = issues_of(std::string(kGood).insert(1, R"("sweep": {"axes": {"cluster.ranks": [1, 2, 1.0]}},)"));
  EXPECT_TRUE(has_issue(twice, "sweep.axes[\"cluster.ranks\"][2]", "1.0 repeats the value at [0]"))
      << dump_issues(twice);
  // QA6 F9: one mistake, one problem (not also "two runs would share the id").
  EXPECT_EQ(twice.size(), 1u) << dump_issues(twice);
  auto zip = issues_of(std::string(kGood).insert(
      1, R"("sweep": {"zip": [{"cluster.ranks": [1, 2]}, {"training.optimizer.lr": [0.1, -1]}]},)"));
  EXPECT_TRUE(has_issue(zip, "sweep.zip[1][\"training.optimizer.lr\"][1]", "> 0")) << dump_issues(zip);
}

TEST(ConfigErrors, RulesAcrossOptimizerTargetAndSweep) {
  auto is = issues_of(R"({"training": {"optimizer": {"nesterov": true}, "target": {"value": 0.9}},
                          "model": {"layers": [784, 10]}})");
  EXPECT_TRUE(has_issue(is, "training.optimizer.nesterov", "momentum > 0")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "training.target.value", "needs training.target.metric")) << dump_issues(is);
  auto acc = issues_of(R"({"training": {"target": {"metric": "eval_accuracy", "value": 2}}, "model": {"layers": [784, 10]}})");
  EXPECT_TRUE(has_issue(acc, "training.target.value", "(0, 1]")) << dump_issues(acc);
  auto name = issues_of(std::string(kGood).insert(1, R"("sweep": {"axes": {"name": ["a", "b"]}},)"));
  EXPECT_TRUE(has_issue(name, "sweep.axes[\"name\"]", "cannot be swept")) << dump_issues(name);
  // 8 axes of 256 values: the run count is refused, not wrapped around.
  json huge = json::parse(kGood);
  for (const char* p : {"training.seed", "training.steps", "data.batch_per_rank", "training.eval_every",
                        "data.teacher.seed", "training.optimizer.lr", "training.optimizer.eps", "sync.bucket_mb"}) {
    json v = json::array();
    for (int i = 1; i <= 256; ++i) v.push_back(i);
    huge["sweep"]["axes"][p] = v;
  }
  auto too_many = issues_of(huge.dump());
  EXPECT_TRUE(has_issue(too_many, "sweep", "more than the limit")) << dump_issues(too_many);
  // A plain string for a string field through --set, even when it looks like a number.
  Scenario s = parse_scenario(kGood, "t.json", {"name=2024"});
  EXPECT_EQ(s.name, "2024");
}

TEST(ConfigErrors, KindSpecificFieldsAndCrossRules) {
  auto is = issues_of(R"({"model": {"kind": "mlp", "layers": [8, 3], "initial_weights": [[1]]},
    "data": {"kind": "teacher", "ranks": [[{"y": [[1]]}]], "teacher": {"in_dim": 8, "out_dim": 3, "noise": 2}},
    "training": {"schedule": {"kind": "warmup_cosine", "min_lr": 1.0}}})");
  EXPECT_TRUE(has_issue(is, "model.initial_weights", "only applies when model.kind is \"linear\"")) << dump_issues(is);
  EXPECT_TRUE(has_issue(is, "data.ranks", "only applies when data.kind is \"inline\"")) << dump_issues(is);
  auto is2 = issues_of(R"({"model": {"kind": "mlp", "layers": [8, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3, "noise": 2}},
    "training": {"schedule": {"kind": "warmup_cosine", "min_lr": 1.0}}})");
  EXPECT_TRUE(has_issue(is2, "data.teacher.noise", "<= 1")) << dump_issues(is2);
  EXPECT_TRUE(has_issue(is2, "training.schedule.min_lr", "<= training.optimizer.lr")) << dump_issues(is2);
}

TEST(ConfigErrors, DataThatCannotFeedARunIsRefusedBeforeAnyRun) {
  // One global batch (4 ranks x 2 micro-batches x 200) is larger than the 1024-sample training set.
  auto big = issues_of(R"({"model": {"kind": "mlp", "layers": [8, 3]}, "cluster": {"ranks": 4},
    "training": {"accumulation_steps": 2},
    "data": {"kind": "teacher", "batch_per_rank": 200, "teacher": {"in_dim": 8, "out_dim": 3, "train_samples": 1024}}})");
  EXPECT_TRUE(has_issue(big, "data.batch_per_rank", "exceeds the training set")) << dump_issues(big);
  // Labels beyond the model's classes; every micro-batch empty; messages carry no source locations.
  auto labels = issues_of(R"({"model": {"kind": "linear", "layers": [1, 3], "loss": "cross_entropy"},
    "data": {"kind": "inline", "ranks": [[{"y": [0, 3]}]]}})");
  EXPECT_TRUE(has_issue(labels, "data.ranks", "labels must be < 3")) << dump_issues(labels);
  auto empty = issues_of(R"({"model": {"kind": "linear", "layers": [1, 1], "loss": "mse"},
    "data": {"kind": "inline", "ranks": [[{"y": []}]]}})");
  EXPECT_TRUE(has_issue(empty, "data.ranks", "step 1 has no samples on any rank")) << dump_issues(empty);
  auto shape = issues_of(R"({"model": {"kind": "linear", "layers": [2, 1], "loss": "mse"},
    "data": {"kind": "inline", "ranks": [[{"x": [[1, 2], [3]], "y": [[1], [2]]}]]}})");
  ASSERT_FALSE(shape.empty());
  for (const auto& i : shape) {
    EXPECT_EQ(i.message.find("sim/"), std::string::npos) << i.message;
    EXPECT_EQ(i.message.find("(expected"), std::string::npos) << i.message;
  }
  EXPECT_TRUE(has_issue(shape, "data.ranks[0][0].x[1]", "2 numbers")) << dump_issues(shape);
  // Rows that disagree among themselves are measured against the model's width (mlp, linear): a wrong first row is
  // the one named. Rows that agree among themselves but not with the model name model.layers.
  auto first = issues_of(R"({"model": {"kind": "mlp", "layers": [3, 5, 2], "loss": "mse"},
    "data": {"kind": "inline", "ranks": [[{"x": [[1, 2]], "y": [[1, 0]]}, {"x": [[1, 2, 3]], "y": [[0, 1]]}]]}})");
  EXPECT_TRUE(has_issue(first, "data.ranks[0][0].x[0]", "expected 3 numbers (model.layers[0]), got 2"))
      << dump_issues(first);
  EXPECT_FALSE(has_issue(first, "data.ranks[0][1].x[0]", "numbers")) << dump_issues(first);
  auto targets = issues_of(R"({"model": {"kind": "mlp", "layers": [1, 4, 2], "loss": "mse"},
    "data": {"kind": "inline", "ranks": [[{"y": [[1, 0, 1]]}, {"y": [[1, 0]]}]]}})");
  EXPECT_TRUE(has_issue(targets, "data.ranks[0][0].y[0]", "expected 2 numbers (model.layers[2]), got 3"))
      << dump_issues(targets);
  auto consistent = issues_of(R"({"model": {"kind": "mlp", "layers": [2, 4, 1], "loss": "mse"},
    "data": {"kind": "inline", "ranks": [[{"x": [[1, 2, 3]], "y": [[1]]}, {"x": [[3, 2, 1]], "y": [[0]]}]]}})");
  EXPECT_TRUE(has_issue(consistent, "model.layers[0]", "inline samples have 3 inputs, got 2"))
      << dump_issues(consistent);
}

}  // namespace
}  // namespace gs

namespace gs {
namespace {

// sync.stage and sync.kind "zero": stage 4 is out of range, a stage without kind zero and local SGD's fields under
// zero are refused at their paths, and zero takes only the cast compressors.
TEST(ConfigErrors, ZeroFieldsAreCheckedAtTheirPaths) {
  auto with = [](const std::string& sync, const std::string& extra = "") {
    return issues_of(R"({"name": "z", "model": {"kind": "mlp", "layers": [8, 4, 3]},
      "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "training": {"steps": 3},
      "cluster": {"ranks": 2}, "sync": )" + sync + extra + "}");
  };
  auto is = with(R"({"kind": "zero", "stage": 4})");
  ASSERT_EQ(is.size(), 1u) << dump_issues(is);
  EXPECT_EQ(is[0].path, "sync.stage");
  is = with(R"({"kind": "allreduce", "stage": 2})");
  ASSERT_EQ(is.size(), 1u) << dump_issues(is);
  EXPECT_EQ(is[0].path, "sync.stage");
  EXPECT_EQ(is[0].message, "only applies when sync.kind is \"zero\" (it is \"allreduce\")");
  is = with(R"({"kind": "zero", "stage": 3, "period": 4})");
  ASSERT_EQ(is.size(), 1u) << dump_issues(is);
  EXPECT_EQ(is[0].path, "sync.period");
  is = with(R"({"kind": "zero"})", R"(, "compression": {"kind": "topk", "ratio": 0.01})");
  ASSERT_EQ(is.size(), 1u) << dump_issues(is);
  EXPECT_EQ(is[0].path, "compression.kind");
  EXPECT_NE(is[0].message.find("use \"none\", \"fp16\" or \"bf16\""), std::string::npos) << is[0].message;
}

// sync.reduce_every_microbatch: only under sync.kind "zero", only with sharded gradients (stage 2 or 3), and only
// in fp32 (no cast compressor, not fp16_pure); stage 2 and 3 take it.
TEST(ConfigErrors, ReduceEveryMicrobatchIsRefusedWhereTheGradientIsNotShardedOrNotFp32) {
  auto with = [](const std::string& sync, const std::string& extra = "") {
    return issues_of(R"({"name": "z", "model": {"kind": "mlp", "layers": [8, 4, 3]},
      "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}},
      "training": {"steps": 3, "accumulation_steps": 2}, "cluster": {"ranks": 2}, "sync": )" + sync + extra + "}");
  };
  auto is = with(R"({"kind": "zero", "stage": 1, "reduce_every_microbatch": true})");
  ASSERT_EQ(is.size(), 1u) << dump_issues(is);
  EXPECT_EQ(is[0].path, "sync.reduce_every_microbatch");
  EXPECT_NE(is[0].message.find("sync.stage 2 or 3"), std::string::npos) << is[0].message;
  EXPECT_NE(is[0].message.find("got sync.stage 1"), std::string::npos) << is[0].message;
  is = with(R"({"kind": "allreduce", "reduce_every_microbatch": true})");
  ASSERT_EQ(is.size(), 1u) << dump_issues(is);
  EXPECT_EQ(is[0].path, "sync.reduce_every_microbatch");
  EXPECT_EQ(is[0].message, "only applies when sync.kind is \"zero\" (it is \"allreduce\")");
  is = with(R"({"kind": "zero", "stage": 2, "reduce_every_microbatch": true})", R"(, "compression": {"kind": "bf16"})");
  ASSERT_EQ(is.size(), 1u) << dump_issues(is);
  EXPECT_EQ(is[0].path, "sync.reduce_every_microbatch");
  EXPECT_NE(is[0].message.find("compression.kind \"bf16\""), std::string::npos) << is[0].message;
  is = with(R"({"kind": "zero", "stage": 3, "reduce_every_microbatch": true})",
            R"(, "precision": {"mode": "fp16_pure", "loss_scale": "dynamic"})");
  ASSERT_EQ(is.size(), 1u) << dump_issues(is);
  EXPECT_EQ(is[0].path, "sync.reduce_every_microbatch");
  for (const char* sync : {R"({"kind": "zero", "stage": 2, "reduce_every_microbatch": true})",
                           R"({"kind": "zero", "stage": 3, "reduce_every_microbatch": true})",
                           R"({"kind": "zero", "stage": 1, "reduce_every_microbatch": false})"}) {
    const std::string text = R"({"name": "z", "model": {"kind": "mlp", "layers": [8, 4, 3]},
      "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}},
      "training": {"steps": 3, "accumulation_steps": 2}, "cluster": {"ranks": 2}, "sync": )" + std::string(sync) + "}";
    EXPECT_NO_THROW(parse_scenario(text, "good.json")) << sync;
  }
}

}  // namespace
}  // namespace gs

// Under mpirun -np P, cluster.ranks must be a multiple of P; the count is in the singular for one rank.
TEST(ConfigErrors, RanksNotSplittingOverProcessesAreCountedInTheSingularAndPlural) {
  gs::RunConfig c;
  c.cluster.ranks = 1;
  auto one = gs::process_issues(c, 2);
  ASSERT_FALSE(one.empty());
  EXPECT_EQ(one[0].path, "cluster.ranks");
  EXPECT_EQ(one[0].message, "1 rank cannot be split evenly over 2 processes (mpirun -np 2): expected a multiple of 2");
  c.cluster.ranks = 6;
  auto six = gs::process_issues(c, 4);
  ASSERT_FALSE(six.empty());
  EXPECT_EQ(six[0].message, "6 ranks cannot be split evenly over 4 processes (mpirun -np 4): expected a multiple of 4");
  c.cluster.ranks = 8;
  for (const auto& i : gs::process_issues(c, 4)) EXPECT_NE(i.path, "cluster.ranks") << i.message;
}
