/**
 * @file run_folder.h
 * @brief The names of the files in a gpt2-train --out folder that other programs read: the
 *        checkpoint pair of step N, OUT/model_%08d.bin (an llm.c model file) and
 *        OUT/state_%08d.bin (its training state), and the run's record OUT/run.json.
 *
 * gpt2-train writes them (train/run_files.h); gpt2-generate reads the model files and tells
 * such a folder from a Hugging Face model directory by its run.json. The names only: nothing
 * here reads or writes a file but training_state_files(), which lists a folder.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpt2 {

std::string model_checkpoint_path(const std::string& out_dir, int64_t step);
std::string training_state_path(const std::string& out_dir, int64_t step);
std::string run_record_path(const std::string& out_dir);  // OUT/run.json

/// Step N of a file named model_<digits>.bin (resp. state_<digits>.bin), at most 18 digits;
/// -1 for any other name.
int64_t model_checkpoint_step(const std::string& name);
int64_t training_state_step(const std::string& name);

/// The names of OUT's training-state files (state_<digits>.bin), sorted; empty when OUT is
/// missing. Throws gpt2::Error when OUT is there but cannot be listed.
std::vector<std::string> training_state_files(const std::string& out_dir);

}  // namespace gpt2
