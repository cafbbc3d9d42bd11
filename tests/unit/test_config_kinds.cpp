// The kind fields (model.kind, data.kind, training.optimizer.kind, sync.kind, compression.kind) take their choices,
// their fields' "only applies when ..." rules and the kinds at the start of those fields' docs from the registries
// (KindCatalog, sim/validate/kinds.cpp): nothing is copied, so a registry line is a new kind.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sim/compress/compressor.h"
#include "sim/config/config_read.h"
#include "sim/model/dataset.h"
#include "sim/model/model.h"
#include "sim/optim/optimizer.h"
#include "sim/strategy/strategy.h"
#include "sim/validate/validate.h"

namespace gs {
namespace {

const FieldInfo& field(const std::vector<FieldInfo>& fields, const std::string& path) {
  for (const auto& f : fields)
    if (f.path == path) return f;
  throw std::runtime_error("no field " + path);
}

template <class Registry>
std::vector<std::string> names_of(const Registry& registry) {
  std::vector<std::string> out;
  for (const auto& e : registry) out.emplace_back(e.name);
  return out;
}

// The built-in kinds this file pins, in registry order. A compressor, strategy or model added by a registry line
// comes after them (ChoicesAreTheRegistriesNames) and is left out of builtin_kinds(), so that the messages and docs
// pinned below stay the built-ins' whatever is added (README, "Adding a compressor": one file and one line).
const std::vector<std::pair<std::string, std::vector<std::string>>>& pinned_kinds() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kPinned = {
      {"compression.kind", {"none", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "topk", "randomk", "threshold", "dgc",
                            "qsgd", "terngrad", "signsgd", "onebit", "powersgd"}},
      {"training.optimizer.kind", {"sgd", "adam", "adamw", "onebit_adam", "zero_one_adam", "onebit_lamb"}},
      {"sync.kind", {"allreduce", "independent", "local_sgd", "parameter_server", "zero"}},
      {"data.kind", {"fashion_mnist", "teacher", "inline", "none"}},
  };
  return kPinned;
}

// The registries' catalog with only the pinned kinds of each pinned kind field (registry order kept).
KindCatalog builtin_kinds() {
  KindCatalog kinds = registry_kinds();
  for (KindField& k : kinds)
    for (const auto& [path, names] : pinned_kinds())
      if (k.path == path)
        k.choices.erase(std::remove_if(k.choices.begin(), k.choices.end(),
                                       [&names = names](const KindChoice& c) {
                                         return std::find(names.begin(), names.end(), c.name) == names.end();
                                       }),
                        k.choices.end());
  return kinds;
}

// The built-in kinds' reading of j (config_from_json's reading half, without the validation above it).
std::vector<ConfigIssue> builtin_read(const json& j) {
  RunConfig c;
  std::vector<ConfigIssue> issues;
  read_config(j, builtin_kinds(), c, issues);
  return issues;
}

std::string dump(const std::vector<ConfigIssue>& issues) {
  std::string s;
  for (const auto& i : issues) s += i.path + ": " + i.message + "\n";
  return s;
}

// The choices `gradsweep fields` lists and the reader accepts are the registries' names, in their order.
TEST(ConfigKinds, ChoicesAreTheRegistriesNames) {
  std::vector<std::string> optimizers = names_of(optimizer_registry());
  for (const auto& n : names_of(optimizer_strategy_registry())) optimizers.push_back(n);
  const std::vector<std::pair<std::string, std::vector<std::string>>> expected = {
      {"model.kind", names_of(model_registry())},
      {"data.kind", names_of(dataset_registry())},
      {"training.optimizer.kind", optimizers},
      {"sync.kind", names_of(strategy_registry())},
      {"compression.kind", names_of(compressor_registry())},
  };
  for (const auto& [path, names] : expected) {
    ASSERT_FALSE(names.empty()) << path;
    EXPECT_EQ(field(config_fields(), path).choices, names) << path;
  }
  // The values the earlier hand-written lists held, in their order, first (a registry line lost or moved shows here;
  // one added comes after them).
  for (const auto& [path, pinned] : pinned_kinds()) {
    const std::vector<std::string>& choices = field(config_fields(), path).choices;
    ASSERT_GE(choices.size(), pinned.size()) << path;
    EXPECT_EQ(std::vector<std::string>(choices.begin(), choices.begin() + static_cast<long>(pinned.size())), pinned)
        << path;
  }
  EXPECT_GE(field(config_fields(), "model.kind").choices.size(), 12u);
  // A name the registry lacks is refused with the derived list.
  const std::vector<ConfigIssue> issues = builtin_read({{"compression", {{"kind", "topk2"}}}});
  ASSERT_EQ(issues.size(), 1u) << dump(issues);
  EXPECT_EQ(issues[0].path, "compression.kind");
  EXPECT_EQ(issues[0].message,
            "expected one of \"none\", \"fp16\", \"bf16\", \"fp8_e4m3\", \"fp8_e5m2\", \"topk\", \"randomk\", "
            "\"threshold\", \"dgc\", \"qsgd\", \"terngrad\", \"signsgd\", \"onebit\", \"powersgd\", got \"topk2\"");
}

// A field of some kinds given under another kind is refused with the message the hand-written rule table gave, and
// its doc starts with the kinds whose entries name it.
TEST(ConfigKinds, AFieldOfAnotherKindIsRefusedAsBefore) {
  const std::vector<std::tuple<json, std::string, std::string>> cases = {
      {{{"compression", {{"kind", "qsgd"}, {"ratio", 0.1}}}}, "compression.ratio",
       "only applies when compression.kind is \"topk\", \"randomk\" or \"dgc\" (it is \"qsgd\")"},
      {{{"compression", {{"kind", "dgc"}, {"error_feedback", "gradient"}}}}, "compression.error_feedback",
       "only applies when compression.kind is \"fp16\", \"bf16\", \"fp8_e4m3\", \"fp8_e5m2\", \"topk\", \"randomk\", "
       "\"threshold\", \"qsgd\", \"terngrad\", \"signsgd\", \"onebit\" or \"powersgd\" (it is \"dgc\")"},
      {{{"sync", {{"kind", "zero"}, {"shards", 2}}}}, "sync.shards",
       "only applies when sync.kind is \"parameter_server\" (it is \"zero\")"},
      {{{"sync", {{"kind", "independent"}, {"bucket_mb", 5}}}}, "sync.bucket_mb",
       "only applies when sync.kind is \"allreduce\", \"local_sgd\", \"parameter_server\" or \"zero\" (it is "
       "\"independent\")"},
      {{{"model", {{"kind", "linear"}, {"a", {{1.0}}}}}}, "model.a",
       "only applies when model.kind is \"quadratic\" (it is \"linear\")"},
      {{{"data", {{"teacher", {{"in_dim", 4}}}}}}, "data.teacher",
       "only applies when data.kind is \"teacher\" (it is \"fashion_mnist\")"},
      {{{"training", {{"optimizer", {{"kind", "adam"}, {"freeze_step", 5}}}}}}, "training.optimizer.freeze_step",
       "only applies when training.optimizer.kind is \"onebit_adam\" or \"onebit_lamb\" (it is \"adam\")"},
  };
  for (const auto& [doc, path, message] : cases) {
    const std::vector<ConfigIssue> issues = builtin_read(doc);
    const auto it = std::find_if(issues.begin(), issues.end(), [&](const ConfigIssue& i) { return i.path == path; });
    ASSERT_NE(it, issues.end()) << doc.dump() << "\n" << dump(issues);
    EXPECT_EQ(it->message, message) << doc.dump();
  }
  // compression.divide is a cast's field and an all-reduce's: two rules, the compressor's first.
  const std::vector<ConfigIssue> issues =
      builtin_read({{"sync", {{"kind", "parameter_server"}}}, {"compression", {{"divide", "post"}}}});
  ASSERT_GE(issues.size(), 2u) << dump(issues);
  EXPECT_EQ(issues[0].message, "only applies when compression.kind is \"fp16\", \"bf16\", \"fp8_e4m3\" or "
                               "\"fp8_e5m2\" (it is \"none\")");
  EXPECT_EQ(issues[1].message, "only applies when sync.kind is \"allreduce\" or \"zero\" (it is \"parameter_server\")");
  // The docs' heads, as the field table wrote them by hand before.
  const std::vector<FieldInfo> builtin = field_table(builtin_kinds());
  EXPECT_EQ(field(builtin, "compression.ratio").doc,
            "topk, randomk, dgc: fraction of values kept (when k is 0)");
  EXPECT_EQ(field(builtin, "training.optimizer.beta1").doc,
            "adam, adamw, onebit_adam, zero_one_adam, onebit_lamb: beta1 (DeepSpeed's betas[0])");
  EXPECT_EQ(field(builtin, "data.teacher.hidden").doc, "teacher: hidden width");
  EXPECT_EQ(field(builtin, "sync.bucket_mb").doc,
            "allreduce, local_sgd, parameter_server, zero: bucket size in MiB (after the first)");
  EXPECT_EQ(field(builtin, "compression.divide").doc.rfind("allreduce, zero: casts send", 0), 0u);
}

// One more catalog entry (what a registry line adds) is a choice, takes the fields it names and is refused the others;
// the field table lists it in those fields' docs. Without it the name is no choice.
TEST(ConfigKinds, ANewEntryIsAChoiceWithItsFields) {
  KindCatalog kinds = registry_kinds();
  for (KindField& k : kinds)
    if (k.path == "compression.kind") k.choices.push_back({"mine", {"compression.ratio", "compression.measure_error"}});
  const std::vector<FieldInfo> fields = field_table(kinds);
  EXPECT_EQ(field(fields, "compression.kind").choices.back(), "mine");
  EXPECT_EQ(field(fields, "compression.ratio").doc, "topk, randomk, dgc, mine: fraction of values kept (when k is 0)");
  EXPECT_EQ(field(fields, "compression.tau").doc, field(config_fields(), "compression.tau").doc);
  auto read = [&](const json& compression, const KindCatalog& with) {
    RunConfig c;
    std::vector<ConfigIssue> issues;
    read_config({{"compression", compression}}, with, c, issues);
    return std::make_pair(c, issues);
  };
  auto [c, ok] = read({{"kind", "mine"}, {"ratio", 0.25}}, kinds);
  EXPECT_TRUE(ok.empty()) << dump(ok);
  EXPECT_EQ(c.compression.kind, "mine");
  EXPECT_EQ(c.compression.ratio, 0.25);
  auto [c2, refused] = read({{"kind", "mine"}, {"tau", 0.5}}, kinds);
  ASSERT_EQ(refused.size(), 1u) << dump(refused);
  EXPECT_EQ(refused[0].path, "compression.tau");
  EXPECT_EQ(refused[0].message, "only applies when compression.kind is \"threshold\" (it is \"mine\")");
  auto [c3, unknown] = read({{"kind", "mine"}}, registry_kinds());
  ASSERT_EQ(unknown.size(), 1u) << dump(unknown);
  EXPECT_EQ(unknown[0].path, "compression.kind");
  EXPECT_NE(unknown[0].message.find("got \"mine\""), std::string::npos) << unknown[0].message;
  // An option that names no field is a mistake in the registry line, said with the entry's name.
  kinds.back().choices.back().options.push_back("compression.ratoi");
  try {
    field_table(kinds);
    ADD_FAILURE() << "an option naming no field was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("compression.kind \"mine\": option \"compression.ratoi\" is no field"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gs
