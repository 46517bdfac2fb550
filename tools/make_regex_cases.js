// Writes tests/data/regex_cases.txt: for each pattern (a line "pattern <its JSON>"), strings, a
// line each: "+ " where JavaScript's own RegExp (the ECMAScript engine JSON Schema's "pattern"
// names) matches the string, "- " where it does not, then the string's JSON text as
// JSON.stringify writes it. tests/test_json_schema.cpp checks the schema grammars against it.
//
//   node tools/make_regex_cases.js > tests/data/regex_cases.txt
"use strict";

const patterns = [
    "^[a-f0-9]{8}-[a-f0-9]{4}$", "^(.*)$", "^[^/#]+$", "[A-Za-z0-9_-]*", "^01$|^07$", "^[\\w\\s-]+$",
    "^[A-Za-z][A-Za-z0-9-_/:]*$", "\\d{3}", "^a|b$", "^(?:\\d{1,3}\\.){3}\\d{1,3}$", "^(?<year>\\d{4})-(?<m>0[1-9]|1[0-2])$",
    "^[^\"\\\\]*$", "^[\"\\\\]+$", "^\\S+@\\S+$", "^[\\s\\S]{2,4}$", "^.{0,3}$", "^x{2,}y?$", "^\\u00e9+\\x41$",
    "^[\\u4e00-\\u9fff]+$", "^(a|)b$", "^(ab)*c+?$", "^[^]$", "colou?r", "^\\t\\n$", "^[\\b]$", "^a{,2}$", "^[\\w.-]+$",
    "^[^\\x00-\\x1f]*$", "^[\\x00-\\x1f]+$", "^\\$[A-Z0-9-_]+", "^([a-z]|[ ])*$", "^[0-9]*[MG]$", "^\\w+\\.\\w{2,3}$", "", "^(a?b?){2,3}$",
];
const alphabet = ["a", "b", "c", "x", "y", "0", "1", "7", "9", "-", "_", "/", "#", "@", ".", " ", "\t", "\n", "\"", "\\", "\u00e9",
                  "\u4e2d", "\u0001", "\u001f", "\b", "A", "M", "$", "{", ",", "2", "}", "r", "o", "u", "l", "\u2028", "\u00a0"];
const examples = {
    "^[a-f0-9]{8}-[a-f0-9]{4}$": ["0123abcd-ef01", "0123abcd-ef0", "0123abcg-ef01"],
    "^(?:\\d{1,3}\\.){3}\\d{1,3}$": ["10.0.0.1", "255.255.255.255", "1.2.3", "1.2.3.4.5", "1234.1.1.1"],
    "^(?<year>\\d{4})-(?<m>0[1-9]|1[0-2])$": ["2024-01", "2024-12", "2024-13", "2024-00", "24-01"],
    "^\\S+@\\S+$": ["a@b", "a b@c", "@b", "x@y@z"],
    "^\\u00e9+\\x41$": ["\u00e9A", "\u00e9\u00e9\u00e9A", "A", "eA"],
    "^[\\u4e00-\\u9fff]+$": ["\u4e2d", "\u4e2d\u6587", "a\u4e2d"],
    "colou?r": ["color", "colour", "my colour!", "colr"],
    "^\\t\\n$": ["\t\n", "\t", "\\t\\n"],
    "^[\\b]$": ["\b", "b"],
    "^a{,2}$": ["a{,2}", "aa"],
    "^\\$[A-Z0-9-_]+": ["$A-1", "$", "$a", "$AB_x"],
    "^\\w+\\.\\w{2,3}$": ["file.txt", "a.b", "x.json", "x.html"],
    "^(ab)*c+?$": ["c", "abc", "ababccc", "ab"],
    "^(a?b?){2,3}$": ["", "abab", "bba", "abababa", "ababab"],
    "^x{2,}y?$": ["xx", "xxxy", "xy", "xxyy"],
};

// A fixed sequence (a linear congruential generator), so the file is the same every time.
let seed = 12345;
function next(n) {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return Math.floor(seed / 65536) % n; // the high bits: the low ones of this generator repeat quickly
}

for (const pattern of patterns) {
    const re = new RegExp(pattern);
    const strings = new Set(examples[pattern] || []);
    while (strings.size < 80) {
        let s = "";
        for (let k = next(7); k > 0; k--) s += alphabet[next(alphabet.length)];
        strings.add(s);
    }
    console.log("pattern " + JSON.stringify(pattern));
    for (const s of strings) console.log((re.test(s) ? "+ " : "- ") + JSON.stringify(s));
}
