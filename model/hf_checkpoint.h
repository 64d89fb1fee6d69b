/**
 * @file hf_checkpoint.h
 * @brief Hugging Face GPT-2 model directories (config.json + model.safetensors) to and from this
 *        project's ModelConfig and parameters (ParameterLayout order, fp32).
 *
 * Layouts read: what transformers' save_pretrained writes for GPT2LMHeadModel (tensor names
 * "transformer.wte.weight", "transformer.h.N.attn.c_attn.weight", ...), and GPT2Model's names
 * without the "transformer." prefix (as the hub's original gpt2 files have them). F32, F16 and
 * BF16 tensors, widened to fp32 exactly. lm_head.weight is the classifier tied to wte: absent,
 * or equal to wte bit for bit (else refused). The attn.bias / attn.masked_bias buffers of older
 * transformers are ignored; any other tensor is refused by name. One model.safetensors only
 * (sharded checkpoints are not read).
 * Mapping: transformers' Conv1D stores a dense weight as (in, out), x @ W; this project stores
 * (out, in) (model/parameters.h): c_attn.weight (C,3C) -> qkvw (3C,C), attn.c_proj.weight (C,C)
 * -> attprojw (C,C), mlp.c_fc.weight (C,4C) -> fcw (4C,C), mlp.c_proj.weight (4C,C) -> fcprojw
 * (C,4C), each transposed; q, k, v and the heads are in the same order in both. wte (V,C) gets
 * Vp - V zero rows (Vp = padded_vocab(V)); writing drops rows [V, Vp).
 * config.json: n_embd, n_head, n_layer, n_positions (maxT), vocab_size (V) required, positive
 * integers, n_embd a multiple of n_head; model_type "gpt2"; and every field that would change
 * the function computed is checked against what the model here computes (activation gelu_new
 * or gelu_pytorch_tanh, both GELU's tanh form; layer_norm_epsilon 1e-5; n_inner null or 4C;
 * n_ctx = n_positions; scaled attention; no cross-attention; tied embeddings). A repeated key is
 * refused. Every error is a gpt2::Error naming the file and the field or tensor.
 * Writing: model.safetensors (F32, metadata {"format": "pt"}, as save_pretrained writes) and
 * then config.json (the fields of the hub's gpt2 config), each atomically, into a directory
 * created when missing; config.json comes last, so a directory with it is complete.
 */
#pragma once

#include <string>
#include <vector>

#include "model/config.h"

namespace gpt2 {

constexpr const char* kHfConfigFile = "config.json";
constexpr const char* kHfWeightsFile = "model.safetensors";
/// "--model hf:DIR" names a Hugging Face directory explicitly.
constexpr const char* kHfModelPrefix = "hf:";

/// The directory a model argument names as a Hugging Face model: "hf:DIR", or a directory
/// holding config.json. Empty when the argument is neither. Throws gpt2::Error when "hf:DIR"
/// names no directory or one without config.json.
std::string hf_model_dir_of(const std::string& argument);

/// config.json of dir as a ModelConfig (Vp = padded_vocab(V)); validated as above.
ModelConfig read_hf_config(const std::string& dir);

/// read_hf_config, and the header of model.safetensors checked against it (every tensor's
/// name, dtype and shape) without reading the tensors: a model refused here is never half read.
ModelConfig read_hf_model_config(const std::string& dir);

struct HfModel {
  ModelConfig config;
  std::vector<float> params;  // ParameterLayout order, padding rows of wte 0
};

/// config.json and model.safetensors of dir; everything read_hf_model_config checks is checked
/// before any tensor is read.
HfModel read_hf_model(const std::string& dir);

/// Writes dir/model.safetensors and dir/config.json (creating dir).
void write_hf_model(const std::string& dir, const ModelConfig& config, const float* params);

/// The files beside the weights that transformers' text-generation pipeline needs to load dir
/// alone: generation_config.json (its end-of-text token, as config.json's), and for GPT-2's own
/// vocabulary (V = 50257) the tokenizer: vocab.json and merges.txt (byte for byte the
/// project's data/tokenizer/encoder.json and vocab.bpe, which are GPT-2's), tokenizer_config.json
/// and special_tokens_map.json. Returns the names written.
std::vector<std::string> write_hf_generation_files(const std::string& dir,
                                                   const ModelConfig& config);

}  // namespace gpt2
