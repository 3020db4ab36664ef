// Helpers shared by the tests: temporary pool paths and small process utilities.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

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

/// small_options() with a persistence policy that receives every persistence operation.
inline tlptm::pool_options options_with(tlptm::persist_policy& policy,
                                        tlptm::log_mode mode = tlptm::log_mode::tlptm) {
    tlptm::pool_options o = small_options(mode);
    o.policy = &policy;
    return o;
}

/// A persistence policy for pools in RAM (/dev/shm): the file is what a crash keeps, so
/// non-temporal copies are plain copies and flushes and fences have nothing to do. Tests derive
/// from it to stall or fail one kind of operation.
class ram_policy : public tlptm::persist_policy {
public:
    void stream(void* dst, const void* src, std::size_t n) override { std::memcpy(dst, src, n); }
    void flush(const void*, std::size_t) override {}
    void fence() override {}
};

/// Keeps what x86 guarantees after a crash at the moment of the query and nothing more: lines
/// flushed, and non-temporal stores, once a later fence completed them.
class durable_lines_policy final : public tlptm::persist_policy {
public:
    explicit durable_lines_policy(std::vector<std::uint8_t> image) : image_(std::move(image)) {}
    void attach(const std::uint8_t* base) { base_ = base; }

    void stream(void* dst, const void* src, std::size_t n) override {
        std::memcpy(dst, src, n);
        note(dst, n);
    }
    void flush(const void* addr, std::size_t n) override { note(addr, n); }
    void fence() override {
        for (std::uint64_t line : pending_) // the line as it is now reaches the medium
            std::memcpy(image_.data() + line * 64, base_ + line * 64, 64);
        pending_.clear();
    }
    /// The pool file as a crash now would leave it.
    const std::vector<std::uint8_t>& image() const { return image_; }

private:
    void note(const void* addr, std::size_t n) {
        if (!base_ || n == 0)
            return;
        auto off = static_cast<std::uint64_t>(static_cast<const std::uint8_t*>(addr) - base_);
        for (std::uint64_t l = off / 64; l <= (off + n - 1) / 64; ++l)
            pending_.insert(l);
    }
    std::vector<std::uint8_t> image_;
    const std::uint8_t* base_ = nullptr;
    std::set<std::uint64_t> pending_;
};

/// The whole contents of a file (a pool image). Throws std::runtime_error on failure.
inline std::vector<std::uint8_t> read_file(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
    struct stat sb {};
    std::vector<std::uint8_t> bytes;
    if (::fstat(fd, &sb) == 0)
        bytes.resize(static_cast<std::size_t>(sb.st_size));
    std::size_t done = 0;
    while (done < bytes.size()) {
        ssize_t got =
            ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
        if (got <= 0)
            break;
        done += static_cast<std::size_t>(got);
    }
    ::close(fd);
    if (done != bytes.size())
        throw std::runtime_error("cannot read " + path);
    return bytes;
}

/// Writes n bytes at `offset` of an existing file (to forge or damage a closed pool).
inline void write_at(const std::string& path, std::uint64_t offset, const void* src,
                     std::size_t n) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
    std::size_t done = 0;
    while (done < n) {
        ssize_t put = ::pwrite(fd, static_cast<const std::uint8_t*>(src) + done, n - done,
                               static_cast<off_t>(offset + done));
        if (put <= 0)
            break;
        done += static_cast<std::size_t>(put);
    }
    ::close(fd);
    if (done != n)
        throw std::runtime_error("cannot write " + path);
}

/// Overwrites a file with a saved image of the same size.
inline void write_file(const std::string& path, const std::vector<std::uint8_t>& bytes) {
    write_at(path, 0, bytes.data(), bytes.size());
}

} // namespace tlptm_test
