// Validation of run configurations and scenario loading, above the registries (docs/design.md, section 6). The config
// layer below is a leaf (the structs, the field table, JSON reading and writing, did-you-mean); everything that judges
// a configuration against models, datasets, hardware and storage profiles, the registries and the backend is here.
// Its own layer above runtime (tools/check_layers.py), not part of it: it asks runtime's device.h which backend and
// cuda path a configuration takes, and a run never validates (it gets a validated RunConfig).
#pragma once
#include <string>
#include <vector>

#include "sim/config/run_config.h"
#include "sim/config/scenario.h"

namespace gs {

class Model;

class IdPattern;  // sim/core/id_pattern.h

// The kind fields' choices and the fields that apply under each, from the registries (models, datasets, optimizers
// and the optimizers that are strategies, sync strategies, compressors; kinds.cpp): what the config leaf reads and
// lists the kind fields with.
const KindCatalog& registry_kinds();

// Every field of RunConfig, in table order, with the registries' choices and docs (field_table of registry_kinds()):
// `gradsweep fields`, scenarios/README.md.
const std::vector<FieldInfo>& config_fields();

// Reads j (a whole run configuration, possibly partial: missing fields keep defaults) into a RunConfig. Type and
// range problems, unknown keys (with a did-you-mean suggestion) and cross-field rules are appended to issues, all at
// once: a mistyped or out-of-range field does not hide the cross-field problems of other fields, but a cross-field
// problem that depends on a mistyped field is left out (it is reported only when it holds for every value the
// mistyped fields could take: their default, their choices, their range's ends and a few values between). The
// returned config is only meaningful when no issue was added.
RunConfig config_from_json(const json& j, std::vector<ConfigIssue>& issues);

// Cross-field rules (model/data compatibility, trace size, ...). Appends to issues. structural_checks false skips
// the checks that construct the model and the dataset (config_from_json does when some field is mistyped: they
// depend on nearly every field).
void validate_config(const RunConfig& c, std::vector<ConfigIssue>& issues, bool structural_checks = true);

// The slices a report.timeline file holds per optimizer step (all ranks), as validation bounds it against
// kTimelineMaxSlices: ranks x (2 x micro-batches + per_bucket x buckets + others + 6 x gathered_layers x
// micro-batches), per_bucket 1 (the collective) or 3 with compression (encode, collective, decode), buckets as
// make_buckets cuts the model's tensors, others 3 timing-only (communicate, compress, optimizer) or 12 + micro-batches
// training (with the data stall, the loader's batches and 8 measured phases), gathered_layers the layers with parameters under ZeRO stage 3 (0 otherwise:
// 2 gathers, and where they are exposed up to 2 waits and 2 splits of the compute pass). An upper estimate: at most
// 1.3x the written file, up to 2x under ZeRO stage 3 where few gathers are exposed
// (ReportTimeline.EstimateBoundsTheWrittenSlices).
struct TimelineEstimate {
  double per_step = 0.0, per_bucket = 1.0, buckets = 0.0, others = 12.0, gathered_layers = 0.0;
};
TimelineEstimate timeline_slices_per_step(const RunConfig& c, const Model& model);

// Reads and parses a scenario file, applies overrides ("dotted.path=value", value parsed as JSON or else taken as a
// string; an override replaces any axis over that path), validates and expands. Throws ScenarioError with every
// problem (JSON syntax errors as file:line:column). A problem of expanded runs is named by its sweep place when it
// is on a swept path, else it ends with the runs it comes from: "(sweep run <id without .r>)" or "(sweep runs a, b,
// c and N more)". Problems of the base are reported once, and the sweep is still expanded so that its own problems
// come in the same list.
// keep (--filter; nullptr: every run): the problems of a grid point none of whose run ids it matches are not reported
// (those runs are still in Scenario::runs, with their ids and indices, but never run: the caller filters them out), so
// a filter can leave out the runs that would be refused and run the rest; the base's problems are always reported.
Scenario load_scenario(const std::string& file, const std::vector<std::string>& overrides = {},
                       const IdPattern* keep = nullptr);
Scenario parse_scenario(const std::string& text, const std::string& file_for_messages,
                        const std::vector<std::string>& overrides = {}, const IdPattern* keep = nullptr);

}  // namespace gs
