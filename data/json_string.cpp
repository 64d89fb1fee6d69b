#include "data/json_string.h"

#include "kernels/common/error.h"

namespace gpt2 {

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

// Four hex digits at text[pos]; advances pos. False when they are not there.
bool read_hex4(std::string_view text, size_t& pos, uint32_t* value) {
  if (pos + 4 > text.size()) return false;
  *value = 0;
  for (int k = 0; k < 4; ++k) {
    const char c = text[pos++];
    *value <<= 4;
    if (c >= '0' && c <= '9') *value |= c - '0';
    else if (c >= 'a' && c <= 'f') *value |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') *value |= c - 'A' + 10;
    else return false;
  }
  return true;
}

}  // namespace

std::string decode_json_string(std::string_view text, size_t& pos, std::string* out) {
  if (pos >= text.size() || text[pos] != '"') return "expected '\"'";
  ++pos;
  out->clear();
  while (true) {
    if (pos >= text.size()) return "unterminated string";
    const char c = text[pos++];
    if (c == '"') return "";
    if (static_cast<uint8_t>(c) < 0x20) return "control character in string";
    if (c != '\\') {
      *out += c;
      continue;
    }
    if (pos >= text.size()) return "unterminated escape";
    const char e = text[pos++];
    switch (e) {
      case '"': *out += '"'; break;
      case '\\': *out += '\\'; break;
      case '/': *out += '/'; break;
      case 'b': *out += '\b'; break;
      case 'f': *out += '\f'; break;
      case 'n': *out += '\n'; break;
      case 'r': *out += '\r'; break;
      case 't': *out += '\t'; break;
      case 'u': {
        uint32_t cp = 0;
        if (!read_hex4(text, pos, &cp)) return "bad hex digit in \\u escape";
        if (cp >= 0xDC00 && cp <= 0xDFFF) return "unpaired low surrogate in \\u escape";
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (pos + 2 > text.size() || text[pos] != '\\' || text[pos + 1] != 'u')
            return "unpaired high surrogate in \\u escape";
          pos += 2;
          uint32_t low = 0;
          if (!read_hex4(text, pos, &low)) return "bad hex digit in \\u escape";
          if (low < 0xDC00 || low > 0xDFFF) return "high surrogate not followed by a low one";
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        append_utf8(cp, *out);
        break;
      }
      default: return str_cat("unknown escape '\\", e, "'");
    }
  }
}

}  // namespace gpt2
