/**
 * @file tokenizer_test_fixture.h
 * @brief What the gpt2-tokenize tests share: GPT-2's tokenizer from the test data (loaded once
 *        per suite), a fresh folder per test (testing::ScratchDirTest), and the documents of a
 *        token stream decoded at its end-of-text tokens.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/tokenizer.h"
#include "test_fixtures.h"

namespace gpt2::testing {

class TokenizerFolderTest : public ScratchDirTest {
 protected:
  explicit TokenizerFolderTest(std::string prefix) : ScratchDirTest(std::move(prefix)) {}

  static void SetUpTestSuite() {
    tokenizer_ = new Gpt2Tokenizer(std::string(GPT2_TEST_DATA_DIR) + "/tokenizer/encoder.json",
                                   std::string(GPT2_TEST_DATA_DIR) + "/tokenizer/vocab.bpe");
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }

  /// Splits a token stream at its end-of-text tokens and decodes each document.
  static std::vector<std::string> decode_documents(const std::vector<uint16_t>& tokens) {
    std::vector<std::string> documents;
    std::vector<int> current;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == Gpt2Tokenizer::kEndOfText) {
        if (i > 0) documents.push_back(tokenizer_->decode(current));
        current.clear();
      } else {
        current.push_back(tokens[i]);
      }
    }
    if (!tokens.empty()) documents.push_back(tokenizer_->decode(current));
    return documents;
  }

  static inline Gpt2Tokenizer* tokenizer_ = nullptr;
};

}  // namespace gpt2::testing
