// gpt2-train: trains GPT-2 on token shards; everything lives in the gpt2_train library
// (train/trainer.h), so that tests can run the same code in-process. Exit codes: 0 success,
// 1 error (bad file, no GPU, out of memory), 2 bad command line.
#include "train/trainer.h"

int main(int argc, char** argv) { return gpt2::train_main(argc, argv); }
