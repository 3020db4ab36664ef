// Helpers shared by the tests: temporary pool paths and small process utilities.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <tlptm/tlptm.hpp>

#ifndef TLPTM_TEST_TMPDIR
#define TLPTM_TEST_TMPDIR "/dev/shm"
#endif

namespace tlptm_test {

/// A unique pool path in the test directory ($TLPTM_TEST_DIR, else TLPTM_TEST_TMPDIR), removed
/// when the object dies.
class temp_path {
public:
    explicit temp_path(const std::string& name) {
        static std::atomic<unsigned> counter{0};
        const char* dir = std::getenv("TLPTM_TEST_DIR");
        std::filesystem::path d = dir && *dir ? dir : TLPTM_TEST_TMPDIR;
        if (!std::filesystem::is_directory(d))
            d = std::filesystem::temp_directory_path();
        path_ = (d / ("tlptm-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) +
                      "-" + name + ".pool"))
                    .string();
        std::filesystem::remove(path_);
    }
    ~temp_path() {
        std::error_code ec;
        std::filesystem::remove(path_, ec);
    }
    temp_path(const temp_path&) = delete;
    temp_path& operator=(const temp_path&) = delete;

    const std::string& str() const noexcept { return path_; }
    operator const std::string&() const noexcept { return path_; }

private:
    std::string path_;
};

/// Small pools keep the tests fast: 4 thread slots of 64 KiB log each.
inline tlptm::pool_options small_options(tlptm::log_mode mode = tlptm::log_mode::tlptm) {
    tlptm::pool_options o;
    o.size = std::size_t{8} << 20;
    o.max_threads = 4;
    o.log_capacity = std::size_t{64} << 10;
    o.mode = mode;
    o.durability = tlptm::durability::emulate_pmem;
    return o;
}

} // namespace tlptm_test
