// The reading half of a run configuration, which validation (config_from_json, sim/validate/validate.h) composes
// with its cross-field rules: the leaf's checks of the JSON itself (unknown keys, fields of another kind, types and
// ranges) and the pitfall aliases, which set other fields.
#pragma once
#include <string>
#include <vector>

#include "sim/config/run_config.h"

namespace gs {

// j (a JSON object, possibly partial: missing fields keep their defaults) into c: unknown keys (with did-you-mean),
// fields given for another kind (the kind fields' choices and options from `kinds`), a target value without a
// metric, types and ranges, appended to issues. Returns the fields whose value was refused or could not be read
// (mistyped, out of range, under a section that is no object): the cross-field rules must not judge their defaults.
std::vector<std::string> read_config(const json& j, const KindCatalog& kinds, RunConfig& c,
                                     std::vector<ConfigIssue>& issues);

// The fields of j into c (types and ranges, a kind field's choices from `kinds`; betas into beta1 and beta2; whether
// the fields whose default 0 means "not given" were given); returns the fields whose value was refused.
std::vector<std::string> read_fields(const json& j, const KindCatalog& kinds, RunConfig& c,
                                     std::vector<ConfigIssue>& issues);

// training.pitfall fp16_pure_unscaled and delay_allreduce stand for settings of other fields: a field the scenario
// leaves out takes the pitfall's value; one it sets to anything else is refused (validate_config checks the result).
void apply_pitfall_alias(const json& j, RunConfig& c, std::vector<ConfigIssue>& issues);

// Values a mistyped field could have been meant to take, for the cross-field rules that do not depend on it
// (config_from_json): its default, every choice (strings), true and false, the ends of its range and a few values
// between (numbers), a few layer lists.
std::vector<json> candidate_values(const FieldInfo& f);

}  // namespace gs
