// A small JSON reader for the tests' reference files (nanoGPT's reference.json, golden sets).
#pragma once
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_files.h"

struct Json {
    enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
    bool boolean = false;
    double number = 0;
    std::string string;
    std::vector<Json> array;
    std::map<std::string, Json> object;
    std::vector<std::string> keys; // the object's keys in the order written
    size_t begin = 0, end = 0;     // where the value's text is in the document parsed

    const Json& operator[](const std::string& key) const {
        auto it = object.find(key);
        if (it == object.end()) throw std::runtime_error("json: no key " + key);
        return it->second;
    }
    const Json& operator[](size_t i) const { return array.at(i); }
    bool has(const std::string& key) const { return object.count(key) != 0; }
    size_t size() const { return kind == Array ? array.size() : object.size(); }
    std::vector<float> floats() const {
        std::vector<float> out;
        for (const Json& v : array) out.push_back((float)v.number);
        return out;
    }
    std::vector<int32_t> ints() const {
        std::vector<int32_t> out;
        for (const Json& v : array) out.push_back((int32_t)v.number);
        return out;
    }
};

class JsonParser {
  public:
    explicit JsonParser(const std::string& text) : s(text) {}
    Json parse() {
        Json v = value();
        skip();
        if (i != s.size()) fail("trailing characters");
        return v;
    }

  private:
    const std::string& s;
    size_t i = 0;
    [[noreturn]] void fail(const char* what) { throw std::runtime_error(std::string("json: ") + what + " at " + std::to_string(i)); }
    void skip() {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
    }
    bool literal(const char* word) {
        size_t n = std::char_traits<char>::length(word);
        if (s.compare(i, n, word) != 0) return false;
        i += n;
        return true;
    }
    uint32_t hex4() {
        if (i + 4 > s.size()) fail("short \\u escape");
        uint32_t v = (uint32_t)std::stoul(s.substr(i, 4), nullptr, 16);
        i += 4;
        return v;
    }
    std::string str() {
        std::string out;
        i++; // opening quote
        while (i < s.size() && s[i] != '"') {
            char c = s[i++];
            if (c != '\\') { out += c; continue; }
            char e = s[i++];
            switch (e) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'u': {
                uint32_t cp = hex4();
                if (cp >= 0xD800 && cp < 0xDC00 && s.compare(i, 2, "\\u") == 0) { // surrogate pair
                    i += 2;
                    uint32_t low = hex4();
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                }
                append_utf8(&out, cp);
                break;
            }
            default: out += e;
            }
        }
        if (i >= s.size()) fail("unterminated string");
        i++;
        return out;
    }
    Json value() {
        skip();
        const size_t begin = i;
        Json v = value_here();
        v.begin = begin;
        v.end = i;
        return v;
    }
    Json value_here() {
        if (i >= s.size()) fail("unexpected end");
        Json v;
        char c = s[i];
        if (c == '{') {
            v.kind = Json::Object;
            i++;
            skip();
            if (s[i] == '}') { i++; return v; }
            for (;;) {
                skip();
                std::string key = str();
                skip();
                if (s[i++] != ':') fail("expected ':'");
                v.object[key] = value();
                v.keys.push_back(key);
                skip();
                if (s[i] == ',') { i++; continue; }
                if (s[i++] != '}') fail("expected '}'");
                return v;
            }
        }
        if (c == '[') {
            v.kind = Json::Array;
            i++;
            skip();
            if (s[i] == ']') { i++; return v; }
            for (;;) {
                v.array.push_back(value());
                skip();
                if (s[i] == ',') { i++; continue; }
                if (s[i++] != ']') fail("expected ']'");
                return v;
            }
        }
        if (c == '"') { v.kind = Json::String; v.string = str(); return v; }
        if (literal("true")) { v.kind = Json::Bool; v.boolean = true; return v; }
        if (literal("false")) { v.kind = Json::Bool; return v; }
        if (literal("null")) return v;
        v.kind = Json::Number;
        char* end;
        v.number = std::strtod(s.c_str() + i, &end);
        if (end == s.c_str() + i) fail("bad value");
        i = (size_t)(end - s.c_str());
        return v;
    }
};

inline std::string read_file(const std::string& path) {
    std::string data;
    if (!read_whole_file(path, &data)) throw std::runtime_error("cannot open " + path);
    return data;
}

inline Json read_json(const std::string& path) { return JsonParser(read_file(path)).parse(); }
