// Placeholder until the tokenizer tool lands (issue 2, data/): refuses to run.
#include <cstdio>
int main() {
  std::fprintf(stderr, "gpt2-tokenize: not built yet\n");
  return 1;
}
