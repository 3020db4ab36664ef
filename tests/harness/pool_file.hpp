// Crash-consistency harness: the geometry of a pool image, pool files on disk, a second
// mapping of them, and read-only views of a pool's allocator metadata.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <tlptm/tlptm.hpp>

namespace tlptm_harness {

inline constexpr std::uint64_t line_size = 64;

/// Where an offset lies in a pool (for messages and for classifying flushes).
struct pool_layout {
    std::uint64_t size = 0, base_address = 0, log_offset = 0, ring_size = 0, max_threads = 0,
                  meta_offset = 0, meta_size = 0, heap_offset = 0, heap_size = 0, root_offset = 0,
                  root_capacity = 0;

    static constexpr std::uint64_t ct_offset = offsetof(tlptm::detail::pool_header, checkpoint_ts);
    static constexpr std::uint64_t root_info_offset =
        offsetof(tlptm::detail::pool_header, root_info);

    /// Reads the geometry from the header at the start of `image` (no validation: the image
    /// comes from a pool the library created).
    static pool_layout of(const std::uint8_t* image) {
        tlptm::detail::pool_header h;
        std::memcpy(&h, image, sizeof h);
        pool_layout l;
        l.size = h.pool_size;
        l.base_address = h.base_address;
        l.log_offset = h.log_offset;
        l.ring_size = h.ring_size;
        l.max_threads = h.max_threads;
        l.meta_offset = h.meta_offset;
        l.meta_size = h.meta_size;
        l.heap_offset = h.heap_offset;
        l.heap_size = h.heap_size;
        l.root_offset = h.root_offset;
        l.root_capacity = h.root_capacity;
        return l;
    }

    std::uint64_t log_end() const noexcept { return log_offset + max_threads * ring_size; }
    bool in_rings(std::uint64_t off) const noexcept { return off >= log_offset && off < log_end(); }
    /// The first line of a ring: generation and base timestamp.
    bool ring_header(std::uint64_t off) const noexcept {
        return in_rings(off) && (off - log_offset) % ring_size < tlptm::detail::ring_header_bytes;
    }
    bool ring_data(std::uint64_t off) const noexcept { return in_rings(off) && !ring_header(off); }
    bool in_meta(std::uint64_t off) const noexcept {
        return off >= meta_offset && off < meta_offset + meta_size;
    }
    bool in_heap(std::uint64_t off) const noexcept {
        return off >= heap_offset && off < heap_offset + heap_size;
    }
    /// Heap and allocator metadata: what recovery may write (I5).
    bool in_data(std::uint64_t off) const noexcept { return in_meta(off) || in_heap(off); }

    std::string area(std::uint64_t off) const {
        if (off / line_size == ct_offset / line_size)
            return "header CT line";
        if (off / line_size == root_info_offset / line_size)
            return "header root_info line";
        if (off < tlptm::detail::header_bytes)
            return "header";
        if (in_rings(off))
            return "ring " + std::to_string((off - log_offset) / ring_size) +
                   (ring_header(off) ? " header" : " data");
        if (in_meta(off))
            return "allocator metadata";
        if (in_heap(off))
            return off < root_offset + root_capacity ? "heap (root)" : "heap";
        return "unused";
    }
};

inline std::string hex(std::uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}

/// A unique file name in $TLPTM_TEST_DIR, else /dev/shm, else the temporary directory; the
/// file is removed when the object dies.
class scratch_file {
public:
    explicit scratch_file(std::string name) {
        static std::atomic<unsigned> counter{0};
        for (char& c : name)
            if (!std::isalnum(static_cast<unsigned char>(c)))
                c = '-';
        const char* env = std::getenv("TLPTM_TEST_DIR");
        std::filesystem::path dir = env && *env ? env : "/dev/shm";
        if (!std::filesystem::is_directory(dir))
            dir = std::filesystem::temp_directory_path();
        path_ = (dir / ("tlptm-harness-" + std::to_string(::getpid()) + "-" +
                        std::to_string(counter++) + "-" + name + ".pool"))
                    .string();
        std::filesystem::remove(path_);
    }
    ~scratch_file() {
        std::error_code ec;
        std::filesystem::remove(path_, ec);
    }
    scratch_file(const scratch_file&) = delete;
    scratch_file& operator=(const scratch_file&) = delete;

    const std::string& str() const noexcept { return path_; }

private:
    std::string path_;
};

inline std::vector<std::uint8_t> read_whole_file(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
    struct stat sb {};
    if (::fstat(fd, &sb) != 0) {
        ::close(fd);
        throw std::runtime_error("cannot stat " + path);
    }
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(sb.st_size));
    std::size_t done = 0;
    while (done < bytes.size()) {
        ssize_t got =
            ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
        if (got <= 0) {
            ::close(fd);
            throw std::runtime_error("cannot read " + path);
        }
        done += static_cast<std::size_t>(got);
    }
    ::close(fd);
    return bytes;
}

inline void write_whole_file(const std::string& path, const std::uint8_t* bytes, std::size_t n) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        throw std::runtime_error("cannot create " + path + ": " + std::strerror(errno));
    std::size_t done = 0;
    while (done < n) {
        ssize_t put = ::pwrite(fd, bytes + done, n - done, static_cast<off_t>(done));
        if (put <= 0) {
            ::close(fd);
            throw std::runtime_error("cannot write " + path);
        }
        done += static_cast<std::size_t>(put);
    }
    ::close(fd);
}

/// A second, shared mapping of a pool file at an address of the kernel's choice: images are
/// written through it while the pool is closed, and what recovery wrote is read through it
/// while the pool is open (both mappings share the page cache).
class file_view {
public:
    explicit file_view(const std::string& path) {
        fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
        if (fd_ < 0)
            throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
        struct stat sb {};
        if (::fstat(fd_, &sb) != 0)
            throw std::runtime_error("cannot stat " + path);
        size_ = static_cast<std::size_t>(sb.st_size);
        void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
        if (p == MAP_FAILED)
            throw std::runtime_error("cannot map " + path + ": " + std::strerror(errno));
        data_ = static_cast<std::uint8_t*>(p);
    }
    ~file_view() {
        if (data_)
            ::munmap(data_, size_);
        if (fd_ >= 0)
            ::close(fd_);
    }
    file_view(const file_view&) = delete;
    file_view& operator=(const file_view&) = delete;

    std::uint8_t* data() const noexcept { return data_; }
    std::size_t size() const noexcept { return size_; }

private:
    int fd_ = -1;
    std::uint8_t* data_ = nullptr;
    std::size_t size_ = 0;
};

/// The size of the allocated block or span that starts at `p`, read from the pool's persistent
/// allocator metadata (descriptor and bitmap); 0 with `why` set if `p` is not the start of an
/// allocated block. Use it to walk structures of a recovered pool without trusting them.
inline std::uint64_t allocated_block(tlptm::pool& pool, const void* p, std::string& why) {
    namespace d = tlptm::detail;
    d::pool_state& st = pool.state();
    auto a = reinterpret_cast<std::uintptr_t>(p);
    auto b = reinterpret_cast<std::uintptr_t>(st.base);
    if (a < b || a - b < st.heap_begin || a - b >= st.heap_end) {
        why = "pointer " + std::to_string(a) + " outside the heap";
        return 0;
    }
    std::uint64_t off = a - b;
    std::uint64_t i = (off - st.heap_begin) / d::superblock_bytes;
    std::uint64_t within = off - st.heap_begin - i * d::superblock_bytes;
    const std::uint8_t* meta = st.base + st.meta_begin + i * d::meta_bytes_per_superblock;
    std::uint64_t desc;
    std::memcpy(&desc, meta, 8);
    switch (d::descriptor_kind(desc)) {
    case d::sb_kind::small: {
        std::uint64_t size = d::descriptor_payload(desc);
        if (size == 0 || within % size != 0) {
            why = "pointer into superblock " + std::to_string(i) + " is not at a block start";
            return 0;
        }
        std::uint64_t block = within / size;
        if (!((meta[d::bitmap_offset_in_meta + block / 8] >> (block % 8)) & 1)) {
            why = "block " + std::to_string(block) + " of superblock " + std::to_string(i) +
                  " is reachable but free in the allocator bitmap";
            return 0;
        }
        return size;
    }
    case d::sb_kind::span_head:
        if (within != 0) {
            why = "pointer into the middle of a span";
            return 0;
        }
        return d::descriptor_payload(desc) * d::superblock_bytes;
    default:
        why = "pointer to superblock " + std::to_string(i) + " whose descriptor is not allocated";
        return 0;
    }
}

/// Bytes the allocator counts as in use for the root (its reserved superblocks).
inline std::uint64_t root_bytes(tlptm::pool& pool) {
    return pool.state().header->root_capacity;
}

} // namespace tlptm_harness
