// gpt2-train: trains GPT-2 on token shards; everything lives in the gpt2_train library
// (train/trainer.h), so that tests can run the same code in-process. Exit codes: 0 success,
// 1 error (bad file, no GPU, out of memory, diverged run, --out in use), 2 bad command line,
// 128 + signal after SIGTERM or SIGINT (train/signals.h).
#include "train/trainer.h"

int main(int argc, char** argv) { return gpt2::train_main(argc, argv); }
