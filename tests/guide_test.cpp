// docs/guide.md shows code that compiles: every code block marked
//     <!-- snippet: examples/guide/FILE NAME -->
// must equal, line for line, the region of examples/guide/FILE between "// guide: begin NAME"
// and "// guide: end" (with the region's common indentation removed). The examples are built
// and run by examples/guide/CMakeLists.txt; this test keeps the guide from drifting away from
// them. Every region must be shown, and no block may name a missing region.

#include <doctest/doctest.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;

/// The repository's root: this file is tests/guide_test.cpp.
fs::path source_root() {
    return fs::path(__FILE__).parent_path().parent_path();
}

std::vector<std::string> lines_of(const fs::path& p) {
    std::ifstream in(p);
    REQUIRE_MESSAGE(in.good(), "cannot read " << p.string());
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);)
        out.push_back(line);
    return out;
}

std::string trim(const std::string& s) {
    std::size_t b = s.find_first_not_of(" \t");
    std::size_t e = s.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

/// Removes the indentation common to the non-empty lines.
std::vector<std::string> dedent(std::vector<std::string> v) {
    std::size_t common = std::string::npos;
    for (const auto& l : v)
        if (!trim(l).empty())
            common = std::min(common, l.find_first_not_of(' '));
    for (auto& l : v)
        l = l.size() >= common && common != std::string::npos ? l.substr(common) : trim(l);
    return v;
}

/// Regions "FILE NAME" -> lines of every examples/guide/*.cpp.
std::map<std::string, std::vector<std::string>> regions() {
    std::map<std::string, std::vector<std::string>> out;
    for (const auto& e : fs::directory_iterator(source_root() / "examples" / "guide")) {
        if (e.path().extension() != ".cpp")
            continue;
        const std::string file = e.path().filename().string();
        std::string name;
        std::vector<std::string> body;
        bool in = false;
        for (const std::string& line : lines_of(e.path())) {
            const std::string t = trim(line);
            if (!in && t.rfind("// guide: begin ", 0) == 0) {
                name = t.substr(16);
                body.clear();
                in = true;
            } else if (in && t == "// guide: end") {
                INFO(file << " " << name);
                CHECK_MESSAGE(out.count(file + " " + name) == 0, "region defined twice");
                out[file + " " + name] = dedent(body);
                in = false;
            } else if (in) {
                body.push_back(line);
            }
        }
        CHECK_MESSAGE(!in, file << ": region " << name << " has no '// guide: end'");
    }
    return out;
}

/// Code blocks of the guide that carry a snippet marker: "FILE NAME" -> lines.
std::vector<std::pair<std::string, std::vector<std::string>>> guide_blocks() {
    const std::vector<std::string> g = lines_of(source_root() / "docs" / "guide.md");
    const std::string marker = "<!-- snippet: examples/guide/";
    std::vector<std::pair<std::string, std::vector<std::string>>> out;
    for (std::size_t i = 0; i < g.size(); ++i) {
        const std::string t = trim(g[i]);
        if (t.rfind(marker, 0) != 0)
            continue;
        std::string key = t.substr(marker.size());
        key = trim(key.substr(0, key.find("-->")));
        REQUIRE_MESSAGE(i + 1 < g.size(), "marker at the end of the guide");
        REQUIRE_MESSAGE(trim(g[i + 1]) == "```cpp",
                        "line " << i + 2 << ": a snippet marker must be followed by ```cpp");
        std::vector<std::string> body;
        std::size_t j = i + 2;
        for (; j < g.size() && trim(g[j]) != "```"; ++j)
            body.push_back(g[j]);
        REQUIRE_MESSAGE(j < g.size(), "unterminated code block after line " << i + 1);
        out.emplace_back(key, dedent(body));
        i = j;
    }
    return out;
}

} // namespace

TEST_CASE("every code block of docs/guide.md is a region of a compiled example") {
    const auto files = regions();
    const auto blocks = guide_blocks();
    REQUIRE(files.size() >= 10);
    std::map<std::string, int> shown;
    for (const auto& block : blocks) {
        const std::string& key = block.first;
        const std::vector<std::string>& body = block.second;
        INFO("guide block " << key);
        auto it = files.find(key);
        REQUIRE_MESSAGE(it != files.end(), "no such region in examples/guide/");
        CHECK(body == it->second);
        ++shown[key];
    }
    for (const auto& region : files) {
        const std::string& key = region.first;
        INFO("region " << key);
        CHECK_MESSAGE(shown[key] == 1, "shown " << shown[key] << " times in the guide");
    }
}

TEST_CASE("the guide has no unmarked C++ block") {
    const std::vector<std::string> g = lines_of(source_root() / "docs" / "guide.md");
    for (std::size_t i = 0; i < g.size(); ++i) {
        if (trim(g[i]) != "```cpp")
            continue;
        INFO("line " << i + 1);
        CHECK((i > 0 && trim(g[i - 1]).rfind("<!-- snippet: ", 0) == 0));
    }
}
