#include "data/paths.h"

#include <cstdlib>

#ifndef GPT2_DEFAULT_DATA_DIR
#error "GPT2_DEFAULT_DATA_DIR must be defined by the build"
#endif

namespace gpt2 {

std::string data_dir() {
  const char* env = std::getenv("GPT2_DATA_DIR");
  return (env != nullptr && env[0] != '\0') ? std::string(env) : std::string(GPT2_DEFAULT_DATA_DIR);
}

std::string default_train_pattern() { return data_dir() + "/default/kjv_train.bin"; }
std::string default_val_pattern() { return data_dir() + "/default/kjv_val.bin"; }
std::string tokenizer_dir() { return data_dir() + "/tokenizer"; }

}  // namespace gpt2
