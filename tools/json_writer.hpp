// tlptm tool — a small JSON writer (objects, arrays, strings, numbers, booleans, null).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace tlptm::tool {

/// Appends `s` to `out` as a JSON string literal: quotes, backslashes and control characters
/// escaped; bytes that are not valid UTF-8 become U+FFFD, so the output is always valid JSON.
inline void append_json_string(std::string& out, std::string_view s) {
    out += '"';
    for (std::size_t i = 0; i < s.size();) {
        auto c = static_cast<unsigned char>(s[i]);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
            ++i;
        } else if (c < 0x20) {
            switch (c) {
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default: {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            }
            }
            ++i;
        } else if (c < 0x80) {
            out += static_cast<char>(c);
            ++i;
        } else {
            // A well-formed UTF-8 sequence (no overlong forms, no surrogates) passes through.
            std::size_t n = c >= 0xC2 && c <= 0xDF   ? 2
                            : c >= 0xE0 && c <= 0xEF ? 3
                            : c >= 0xF0 && c <= 0xF4 ? 4
                                                     : 0;
            bool ok = n != 0 && i + n <= s.size();
            for (std::size_t k = 1; ok && k < n; ++k)
                ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
            if (ok && n >= 3) {
                auto c1 = static_cast<unsigned char>(s[i + 1]);
                ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0) &&
                     !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
            }
            if (ok) {
                out.append(s.substr(i, n));
                i += n;
            } else {
                out += "\\ufffd";
                ++i;
            }
        }
    }
    out += '"';
}

/// Builds one JSON document, pretty-printed with two-space indentation. The caller nests
/// begin/end calls correctly; keys are given to every value inside an object and to none
/// inside an array.
class json_writer {
public:
    json_writer& begin_object(std::string_view key = {}) { return open(key, '{'); }
    json_writer& end_object() { return close('}'); }
    json_writer& begin_array(std::string_view key = {}) { return open(key, '['); }
    json_writer& end_array() { return close(']'); }

    json_writer& string(std::string_view key, std::string_view v) {
        prefix(key);
        append_json_string(out_, v);
        return *this;
    }
    json_writer& number(std::string_view key, std::uint64_t v) {
        prefix(key);
        out_ += std::to_string(v);
        return *this;
    }
    json_writer& number(std::string_view key, double v) {
        prefix(key);
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.6g", v);
        out_ += buf;
        return *this;
    }
    json_writer& boolean(std::string_view key, bool v) {
        prefix(key);
        out_ += v ? "true" : "false";
        return *this;
    }
    json_writer& null(std::string_view key) {
        prefix(key);
        out_ += "null";
        return *this;
    }

    /// The document, with a final newline.
    std::string str() const { return out_ + "\n"; }

private:
    json_writer& open(std::string_view key, char bracket) {
        prefix(key);
        out_ += bracket;
        first_.push_back(true);
        return *this;
    }
    json_writer& close(char bracket) {
        bool empty = first_.back();
        first_.pop_back();
        if (!empty)
            newline();
        out_ += bracket;
        return *this;
    }
    void prefix(std::string_view key) {
        if (!first_.empty()) {
            if (!first_.back())
                out_ += ',';
            first_.back() = false;
            newline();
        }
        if (!key.empty()) {
            append_json_string(out_, key);
            out_ += ": ";
        }
    }
    void newline() {
        out_ += '\n';
        out_.append(2 * first_.size(), ' ');
    }

    std::string out_;
    std::vector<bool> first_; ///< per open container: nothing written in it yet
};

} // namespace tlptm::tool
