#include "train/run_record.h"

#include <filesystem>

#include "base/file_io.h"
#include "base/version.h"
#include "train/options.h"
#include "train/run_files.h"

namespace gpt2 {

std::string config_record_path(const std::string& out_dir) {
  return (std::filesystem::path(out_dir) / "config.json").string();
}

Json train_config_json(const TrainConfig& c, const RunDataFiles& files) {
  Json data = Json::object();
  data["train_data"] = c.train_data.pattern;
  data["train_files"] = files.train;
  data["val_data"] = c.val_data.pattern;
  data["val_files"] = files.val;

  Json model = Json::object();
  model["name"] = c.model_name;
  model["source"] = to_string(c.model_source);
  model["path"] = c.model_path;
  model["max_seq_len"] = c.model.config.max_seq_len;
  model["vocab_size"] = c.model.config.vocab_size;
  model["padded_vocab_size"] = c.model.config.padded_vocab_size;
  model["num_layers"] = c.model.config.num_layers;
  model["num_heads"] = c.model.config.num_heads;
  model["channels"] = c.model.config.channels;

  Json schedule = Json::object();
  schedule["kind"] = to_string(c.lr_schedule.kind);
  schedule["max_lr"] = json_float(c.lr_schedule.max_lr);
  schedule["warmup_steps"] = c.lr_schedule.warmup_steps;
  schedule["total_steps"] = c.lr_schedule.total_steps;
  schedule["final_lr_frac"] = json_float(c.lr_schedule.final_lr_frac);

  Json config = Json::object();
  config["data"] = std::move(data);
  config["model"] = std::move(model);
  config["device"] = to_string(c.device);
  config["attention"] = to_string(c.model.attention);
  config["flash_kernel"] = to_string(c.model.flash_kernel);
  config["deterministic_attention"] = c.model.deterministic_attention;
  config["classifier_chunk_rows"] = c.model.classifier_chunk_rows;
  config["recompute_fc"] = c.model.recompute_fc;
  config["fp8_classifier"] = c.model.fp8_classifier;
  config["fp8_classifier_weight_gradient"] = c.model.fp8_classifier_weight_gradient;
  config["fp8_fast_accumulation"] = c.model.fp8_fast_accumulation;
  config["fp8_amax_history"] = c.model.fp8_amax_history;
  config["fp8_margin"] = c.model.fp8_margin;
  config["fp8_gradient_margin"] = c.model.fp8_gradient_margin;
  config["cuda_graphs"] = c.model.cuda_graphs;
  config["precision"] = to_string(c.model.precision);
  config["batch_size"] = c.model.batch_size;
  config["seq_len"] = c.model.seq_len;
  config["total_batch_size"] = c.total_batch_size;
  config["grad_accum_steps"] = c.grad_accum_steps;
  config["world_size"] = c.world_size;
  config["context_parallel"] = c.context_parallel;
  config["zero_stage"] = c.model.zero_stage;
  config["nccl"] = c.nccl;
  config["overlap_comm"] = c.model.overlap_communication;
  config["overlap_gather"] = c.model.overlap_gather;
  config["grad_reduce"] = to_string(c.model.grad_reduce);
  config["bucket_elements"] = c.model.bucket_elements;
  config["steps"] = c.steps;
  config["lr_schedule"] = std::move(schedule);
  config["weight_decay"] = json_float(c.weight_decay);
  config["grad_clip"] = json_float(c.grad_clip);
  config["val_every"] = c.val_every;
  config["val_steps"] = c.val_steps;
  if (!c.validation_note.empty()) config["validation_note"] = c.validation_note;
  config["sample_every"] = c.sample_every;
  config["sample_tokens"] = c.sample_tokens;
  config["out_dir"] = c.out_dir;
  config["checkpoint_every"] = c.checkpoint_every;
  config["save_final"] = c.save_final;
  config["keep_checkpoints"] = c.keep_checkpoints;
  config["resume"] = c.resume;
  config["overwrite"] = c.overwrite;
  config["on_nonfinite"] = to_string(c.on_nonfinite);
  config["seed"] = c.seed;
  return config;
}

void write_config_record(const TrainConfig& config, uint64_t run_id,
                         std::optional<int64_t> resumed_from_step, const RunDataFiles& files) {
  Json record = Json::object();
  record["version"] = build_version();
  record["run_id"] = format_run_id(run_id);
  record["start"] = resumed_from_step ? "resume" : "new";
  if (resumed_from_step) record["resumed_from_step"] = *resumed_from_step;
  record["config"] = train_config_json(config, files);
  // Indented: a file for people to read (and for jq).
  const std::string text = record.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
  write_text_file(config_record_path(config.out_dir), text);
}

}  // namespace gpt2
