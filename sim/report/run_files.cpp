// report.save_weights and report.save_batches (run_files.h).
#include "sim/report/run_files.h"

#include <cerrno>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "sim/compress/compressor.h"
#include "sim/model/dataset.h"
#include "sim/model/model.h"
#include "sim/model/tensor_file.h"
#include "sim/report/file_io.h"
#include "sim/report/timeline.h"

namespace gs {
namespace {

void make_folder(const std::string& dir, const std::string& sub) {
  if (file_ops().mkdirs(dir + "/" + sub) != 0)
    throw ReportIoError("cannot create the folder " + dir + "/" + sub + ": " + std::strerror(errno));
}

// One safetensors file of the parameters `flat`, tensors as the model's table names them.
void write_weights(const std::string& path, const Model& model, const std::vector<float>& flat,
                   const std::map<std::string, std::string>& metadata) {
  std::vector<OutTensor> tensors;
  for (const TensorInfo& t : model.tensors()) tensors.push_back({t.file_name(), t.shape, flat.data() + t.offset});
  write_file_atomic(path, safetensors_bytes(tensors, metadata));
}

// The indices of every completed step, rank and micro-batch: int32 [steps, ranks, K, b].
std::vector<int32_t> batch_indices(const RunConfig& c, int64_t steps) {
  // The training set's size (the teacher's from its configuration, Fashion-MNIST's from its files: decoded once per
  // process and cached).
  const int64_t train = c.data.kind == "teacher" ? c.data.teacher.train_samples : make_dataset(c)->train_size();
  const int64_t N = c.cluster.ranks, K = c.training.accumulation_steps, b = c.data.batch_per_rank;
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(steps * N * K * b));
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t r = 0; r < N; ++r)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t i : micro_batch_indices(c, train, t, k, static_cast<int>(r))) out.push_back(static_cast<int32_t>(i));
  return out;
}

// PowerSGD's initial Q (powersgd_initial_q) as weights/<stem>.powersgd_q.safetensors; its report entry.
json write_powersgd_q(const std::string& dir, const std::string& stem, const RunSpec& spec) {
  const RunConfig& c = spec.config;
  make_folder(dir, "weights");
  const std::unique_ptr<Model> model = make_model(c);
  const std::vector<PowerSgdInitialQ> qs = powersgd_initial_q(c, *model);
  std::vector<OutTensor> tensors;
  for (const PowerSgdInitialQ& q : qs)
    tensors.push_back({model->tensors()[q.tensor].file_name(),
                       {static_cast<int64_t>(q.cols), static_cast<int64_t>(q.rank)}, q.q.data()});
  const std::string name = "weights/" + stem + ".powersgd_q.safetensors";
  write_file_atomic(dir + "/" + name,
                    safetensors_bytes(tensors, {{"format", "pt"}, {"run_id", spec.id}, {"what", "powersgd_initial_q"}}));
  return {{"file", name}, {"names", "torch_state_dict"}, {"rank", c.compression.rank},
          {"start_step", c.compression.start_step}};
}

}  // namespace

std::string run_file_stem(const std::string& run_id, int64_t index) {
  std::string name = timeline_file_name(run_id, index);
  return name.substr(0, name.size() - 5);  // without ".json"
}

RunFiles write_run_files(const std::string& dir, const RunSpec& spec, const RunResult& res) {
  RunFiles out{nullptr, nullptr};
  const RunConfig& c = spec.config;
  const std::string stem = run_file_stem(spec.id, spec.index);
  const bool initial = !res.initial_params.empty(), final = !res.final_params.empty();
  if (initial || final) {
    make_folder(dir, "weights");
    const std::unique_ptr<Model> model = make_model(c);
    std::map<std::string, std::string> meta = {{"format", "pt"}, {"run_id", spec.id}};
    json w = {{"format", "safetensors"}, {"names", "torch_state_dict"}, {"initial", nullptr}, {"final", nullptr},
              {"final_step", nullptr}};
    if (initial) {
      meta["step"] = "0";
      const std::string name = "weights/" + stem + ".initial.safetensors";
      write_weights(dir + "/" + name, *model, res.initial_params, meta);
      w["initial"] = name;
    }
    if (final) {
      meta["step"] = std::to_string(res.steps_completed);
      const std::string name = "weights/" + stem + ".final.safetensors";
      write_weights(dir + "/" + name, *model, res.final_params, meta);
      w["final"] = name;
      w["final_step"] = res.steps_completed;
    }
    out.weights = w;
  }
  if (c.compression.kind == "powersgd" && (c.report.trace || initial))
    out.powersgd_q = write_powersgd_q(dir, stem, spec);
  if (c.report.save_batches && res.data.has_value()) {
    make_folder(dir, "batches");
    const std::vector<int32_t> idx = batch_indices(c, res.steps_completed);
    const std::vector<int64_t> shape = {res.steps_completed, c.cluster.ranks, c.training.accumulation_steps,
                                        c.data.batch_per_rank};
    const std::string name = "batches/" + stem + ".npz";
    write_file_atomic(dir + "/" + name, npz_bytes({{"indices", shape, idx.data()}}));
    out.batches = {{"file", name}, {"array", "indices"}, {"dtype", "int32"}, {"shape", shape}};
  }
  return out;
}

}  // namespace gs
