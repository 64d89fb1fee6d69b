/**
 * @file paths.h
 * @brief Where the embedded default data and the tokenizer files are.
 *
 * data_dir() is $GPT2_DATA_DIR when set, else the source tree's data/ folder fixed at build
 * time. Under it: default/kjv_train.bin, default/kjv_val.bin, tokenizer/encoder.json,
 * tokenizer/vocab.bpe.
 */
#pragma once

#include <string>

namespace gpt2 {

std::string data_dir();
std::string default_train_pattern();   // data_dir()/default/kjv_train.bin
std::string default_val_pattern();     // data_dir()/default/kjv_val.bin
std::string tokenizer_dir();           // data_dir()/tokenizer

}  // namespace gpt2
