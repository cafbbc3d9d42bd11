// The kind fields' choices from the registries: every entry's name and the fields that apply under it, handed to the
// config leaf (KindCatalog, sim/config/run_config.h), which derives the choices, the "only applies when <kind field>
// is ..." rules and the kinds at the start of the fields' docs. Nothing is copied: a registry line is a new kind.
#include <vector>

#include "sim/compress/compressor.h"
#include "sim/model/dataset.h"
#include "sim/model/model.h"
#include "sim/optim/optimizer.h"
#include "sim/strategy/strategy.h"
#include "sim/validate/validate.h"

namespace gs {
namespace {

template <class Registry>
void add_choices(KindField& field, const Registry& registry) {
  for (const auto& e : registry) field.choices.push_back({e.name, e.options, e.issues});
}

}  // namespace

const KindCatalog& registry_kinds() {
  // Built on first use (no static initialization order): the registries are function-local tables too.
  static const KindCatalog kinds = [] {
    KindField model{"model.kind", {}}, data{"data.kind", {}}, optimizer{"training.optimizer.kind", {}},
        sync{"sync.kind", {}}, compression{"compression.kind", {}};
    add_choices(model, model_registry());
    add_choices(data, dataset_registry());
    add_choices(optimizer, optimizer_registry());
    add_choices(optimizer, optimizer_strategy_registry());  // 1-bit Adam, 0/1 Adam: strategies of their own
    add_choices(sync, strategy_registry());
    add_choices(compression, compressor_registry());
    return KindCatalog{model, data, optimizer, sync, compression};
  }();
  return kinds;
}

const std::vector<FieldInfo>& config_fields() {
  static const std::vector<FieldInfo> fields = field_table(registry_kinds());
  return fields;
}

}  // namespace gs
